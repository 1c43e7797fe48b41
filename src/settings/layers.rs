//! The layers settings come from, merged by figment: the built-in defaults, then the TOML file
//! (`--config`), then `QUIESCE_*` environment variables, then flags. Each value keeps the layer
//! that gave it; errors and `quiesce config` name it.

use super::value::InvalidValue;
use std::path::{Path, PathBuf};

use figment::{
    Figment, Metadata, Profile, Provider,
    value::{Dict, Map, Value},
};

use super::{
    ConfigError,
    field::{Field, names},
    value::Setting,
};

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Default,
    File(PathBuf),
    Environment,
    Flag,
}

impl Origin {
    /// "the environment (QUIESCE_MAX_WAIT)", for one field.
    pub fn describe(&self, field: &Field) -> String {
        match self {
            Origin::Default => "the default".to_owned(),
            Origin::File(path) => format!(
                "the config file {} ({} in [{}])",
                path.display(),
                field.name,
                field.section
            ),
            Origin::Environment => format!("the environment ({})", field.variable()),
            Origin::Flag => format!("the flag --{}", field.flag()),
        }
    }
}

const DEFAULT: &str = "default";
const FILE: &str = "file";
const ENVIRONMENT: &str = "environment";
const FLAG: &str = "flag";

/// One layer: settings by section, and where they came from.
struct Layer {
    metadata: Metadata,
    settings: Dict,
}

impl Layer {
    fn new(metadata: Metadata) -> Self {
        Self {
            metadata,
            settings: Dict::new(),
        }
    }

    fn set(&mut self, field: &Field, value: Value) {
        let section = self
            .settings
            .entry(field.section.to_owned())
            .or_insert_with(|| Value::from(Dict::new()));
        if let Value::Dict(_, section) = section {
            section.insert(field.name.to_owned(), value);
        }
    }

    /// The TOML file. Keys go in their section's table (`[schedule]` with `max_wait`) or, as
    /// in earlier versions, at the top level (`max_wait`); a key given both ways, or one no
    /// setting has, is refused. Errors name the key and the line, never a value.
    fn file(path: &Path, fields: &[Field]) -> Result<Self, ConfigError> {
        let invalid = |reason: String| ConfigError::File {
            path: path.to_owned(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
            path: path.to_owned(),
            source,
        })?;
        let table: toml::Table = toml::from_str(&text).map_err(|e| {
            let at = e.span().map_or_else(String::new, |span| {
                let line = text[..span.start].matches('\n').count() + 1;
                format!(" (line {line})")
            });
            invalid(format!("{}{at}", e.message().trim()))
        })?;
        let mut layer = Layer::new(Metadata::from(FILE, path));
        let mut set = |field: &Field, value: toml::Value| -> Result<(), ConfigError> {
            let value = Value::serialize(value).map_err(|e| invalid(e.to_string()))?;
            let taken = layer
                .settings
                .get(field.section)
                .and_then(|s| s.as_dict())
                .is_some_and(|s| s.contains_key(field.name));
            if taken {
                return Err(invalid(format!(
                    "{} is given twice: at the top level{} and in [{}]{}",
                    field.name,
                    line_of(&text, None, field.name),
                    field.section,
                    line_of(&text, Some(field.section), field.name),
                )));
            }
            layer.set(field, value);
            Ok(())
        };
        let known = |section: Option<&str>, name: &str| {
            fields
                .iter()
                .find(|f| f.name == name && section.is_none_or(|s| s == f.section))
        };
        for (key, value) in table {
            match value {
                toml::Value::Table(entries) if fields.iter().any(|f| f.section == key) => {
                    for (name, value) in entries {
                        let field = known(Some(&key), &name).ok_or_else(|| {
                            let at = line_of(&text, Some(&key), &name);
                            invalid(format!("[{key}] has no setting {name}{at}"))
                        })?;
                        set(field, value)?;
                    }
                }
                value => {
                    let field = known(None, &key).ok_or_else(|| {
                        invalid(format!("unknown key {key}{}", line_of(&text, None, &key)))
                    })?;
                    set(field, value)?;
                }
            }
        }
        Ok(layer)
    }
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        self.metadata.clone()
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Map::from([(Profile::Default, self.settings.clone())]))
    }
}

/// Every layer, merged.
pub struct Layers {
    figment: Figment,
}

impl Layers {
    /// `defaults` as the declarations give them, the file if any, the variables `environment`
    /// answers for, and the flags given, each as (field, text).
    pub fn new(
        fields: &[Field],
        defaults: impl IntoIterator<Item = (Field, String)>,
        file: Option<&Path>,
        environment: &dyn Fn(&str) -> Option<String>,
        flags: impl IntoIterator<Item = (Field, String)>,
    ) -> Result<Self, ConfigError> {
        let layer = |name: &'static str, values: Vec<(Field, String)>| {
            let mut layer = Layer::new(Metadata::named(name));
            for (field, text) in values {
                layer.set(&field, Value::from(text));
            }
            layer
        };
        let from_environment = fields
            .iter()
            .filter_map(|field| environment(&field.variable()).map(|text| (*field, text)))
            .collect();
        let mut figment = Figment::new().merge(layer(DEFAULT, defaults.into_iter().collect()));
        if let Some(path) = file {
            figment = figment.merge(Layer::file(path, fields)?);
        }
        let figment = figment
            .merge(layer(ENVIRONMENT, from_environment))
            .merge(layer(FLAG, flags.into_iter().collect()));
        Ok(Self { figment })
    }

    /// The field's value from the last layer that gives one, checked; an optional setting no
    /// layer gives is `None`.
    pub fn read<T: Setting>(
        &self,
        field: &Field,
        check: impl Fn(&T) -> Result<(), InvalidValue>,
    ) -> Result<T, ConfigError> {
        let Ok(value) = self.figment.find_value(&field.path()) else {
            return T::absent().ok_or_else(|| ConfigError::Invalid {
                variable: field.variable(),
                names: names(field),
                value: String::new(),
                origin: "the default".into(),
                reason: "has no value".into(),
            });
        };
        T::read(&value)
            .and_then(|read| check(&read).map(|()| read))
            .map_err(|reason| ConfigError::Invalid {
                variable: field.variable(),
                names: names(field),
                // Secret values are never echoed.
                value: if T::SECRET {
                    String::new()
                } else {
                    format!(" {:?}", describe(&value))
                },
                origin: self.origin(field).describe(field),
                reason: reason.to_string(),
            })
    }

    /// Where the field's value came from.
    pub fn origin(&self, field: &Field) -> Origin {
        self.figment
            .find_value(&field.path())
            .ok()
            .and_then(|value| self.figment.get_metadata(value.tag()))
            .map_or(Origin::Default, |metadata| match metadata.name.as_ref() {
                FILE => Origin::File(
                    metadata
                        .source
                        .as_ref()
                        .and_then(|s| s.file_path())
                        .map(Path::to_owned)
                        .unwrap_or_default(),
                ),
                ENVIRONMENT => Origin::Environment,
                FLAG => Origin::Flag,
                _ => Origin::Default,
            })
    }
}

/// " (line N)" for a key of the file (in `[section]`, or at the top level), so an error points
/// at it; empty if the key cannot be found again.
fn line_of(text: &str, section: Option<&str>, key: &str) -> String {
    let Ok(document) = toml_edit::ImDocument::parse(text) else {
        return String::new();
    };
    let table = match section {
        Some(section) => document
            .get(section)
            .and_then(toml_edit::Item::as_table_like),
        None => Some(document.as_table() as &dyn toml_edit::TableLike),
    };
    table
        .and_then(|table| table.get_key_value(key))
        .and_then(|(key, _)| key.span())
        .map_or_else(String::new, |span| {
            format!(" (line {})", text[..span.start].matches('\n').count() + 1)
        })
}

/// A value as an error shows it: a URL's userinfo (its password) redacted.
fn describe(value: &Value) -> String {
    match value {
        Value::String(_, text) => crate::credentials::redact_passwords(text),
        Value::Char(_, c) => c.to_string(),
        Value::Bool(_, b) => b.to_string(),
        Value::Num(_, n) => super::value::number(*n).map_or_else(String::new, |n| n.to_string()),
        Value::Empty(..) => "nothing".to_owned(),
        Value::Dict(..) => "a table".to_owned(),
        Value::Array(..) => "an array".to_owned(),
    }
}
