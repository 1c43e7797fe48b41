//! The one place a setting is declared: [`section!`] turns a list of fields (doc, type,
//! default, check) into the section's struct and its defaults, its flags for `--help`, and what
//! the layers and `quiesce config` need to read and show it. The variable and the flag of a
//! setting are derived from its name: `max_wait` is `QUIESCE_MAX_WAIT` and `--max-wait`.

pub use super::field::{Field, Shown, variable};
use super::value::InvalidValue;
use super::{ConfigError, layers::Layers};

/// What every section offers the settings as a whole.
pub trait Section: Sized {
    const FIELDS: &'static [Field];

    /// Reads every field from the merged layers, each checked on its own.
    fn read(layers: &Layers) -> Result<Self, ConfigError>;

    /// Checks every field's value on its own (a section built in code has not been read).
    fn check(&self) -> Result<(), ConfigError>;

    /// Every field's value.
    fn shown(&self) -> Vec<Shown>;
}

/// What a section's flags struct offers: the flags that were given, by setting name.
pub trait Flags {
    fn given(&self) -> Vec<(&'static str, &str)>;
}

/// A check: the value is not zero.
pub fn nonzero<T: Default + PartialEq>(value: &T) -> Result<(), InvalidValue> {
    if *value == T::default() {
        Err("must be greater than zero".into())
    } else {
        Ok(())
    }
}

/// A check: the duration is at least `least` (a lease is renewed every third of it).
pub fn at_least(
    least: std::time::Duration,
) -> impl Fn(&std::time::Duration) -> Result<(), InvalidValue> {
    move |value| {
        if *value < least {
            Err(format!("must be at least {}", humantime::format_duration(least)).into())
        } else {
            Ok(())
        }
    }
}

/// A check: the number is between `low` and `high`, both included.
pub fn within(low: u32, high: u32) -> impl Fn(&u32) -> Result<(), InvalidValue> {
    move |value| {
        if (low..=high).contains(value) {
            Ok(())
        } else {
            Err(format!("must be between {low} and {high}").into())
        }
    }
}

/// A flag's help: the setting's doc, its default and its variable.
pub fn help(doc: &str, name: &str, default: &str) -> String {
    format!(
        "{} [default: {default}] [env: {}]",
        doc.trim(),
        variable(name)
    )
}

/// Declares one section of the settings. Each field is written once: its doc (the reference
/// for the file, `--help` and `quiesce config`), its type, its default and, optionally, a check
/// of its value (`check f` with `f: Fn(&T) -> Result<(), InvalidValue>`); `#[value_name = ".."]`
/// renames its value in `--help`.
macro_rules! section {
    (
        $(#[doc = $section_doc:literal])*
        pub struct $name:ident($key:literal, heading $heading:literal), flags $flags:ident {
            $(
                $(#[doc = $doc:literal])+
                $(#[value_name = $value_name:literal])?
                $field:ident : $ty:ty = $default:expr $(, check $check:expr)? ;
            )+
        }
    ) => {
        $(#[doc = $section_doc])*
        #[derive(Debug, Clone)]
        pub struct $name {
            $( $(#[doc = $doc])+ pub $field: $ty, )+
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $( $field: $default, )+ }
            }
        }

        #[doc = concat!("The flags of [`", stringify!($name), "`], one per setting.")]
        #[derive(Debug, Clone, Default, clap::Args)]
        #[command(next_help_heading = $heading)]
        pub struct $flags {
            $(
                #[arg(
                    long,
                    value_name = [$($value_name,)? <$ty as $crate::settings::value::Setting>::VALUE_NAME][0],
                    help = $crate::settings::declare::help(
                        concat!($($doc),+),
                        stringify!($field),
                        &{
                            let default: $ty = $default;
                            $crate::settings::value::Setting::to_text(&default)
                                .filter(|text| !text.is_empty())
                                .unwrap_or_else(|| "none".to_owned())
                        },
                    ),
                    num_args = <$ty as $crate::settings::value::Setting>::flag_arity(),
                    default_missing_value = <$ty as $crate::settings::value::Setting>::flag_missing_value(),
                )]
                pub $field: Option<String>,
            )+
        }

        impl $crate::settings::declare::Section for $name {
            const FIELDS: &'static [$crate::settings::declare::Field] = &[
                $(
                    $crate::settings::declare::Field {
                        section: $key,
                        name: stringify!($field),
                        doc: concat!($($doc),+),
                        secret: <$ty as $crate::settings::value::Setting>::SECRET,
                    },
                )+
            ];

            fn read(
                layers: &$crate::settings::layers::Layers,
            ) -> Result<Self, $crate::settings::ConfigError> {
                let mut fields = <Self as $crate::settings::declare::Section>::FIELDS.iter();
                Ok(Self {
                    $(
                        $field: {
                            let field = fields.next().expect("one entry per field");
                            layers.read::<$ty>(field, |_value: &$ty| -> Result<(), $crate::settings::InvalidValue> {
                                $( ($check)(_value)?; )?
                                Ok(())
                            })?
                        },
                    )+
                })
            }

            fn check(&self) -> Result<(), $crate::settings::ConfigError> {
                let mut fields = <Self as $crate::settings::declare::Section>::FIELDS.iter();
                $(
                    let field = fields.next().expect("one entry per field");
                    let check = |_value: &$ty| -> Result<(), $crate::settings::InvalidValue> {
                        $( ($check)(_value)?; )?
                        Ok(())
                    };
                    check(&self.$field)
                        .map_err(|reason| $crate::settings::ConfigError::conflict(field, reason.to_string()))?;
                )+
                Ok(())
            }

            fn shown(&self) -> Vec<$crate::settings::declare::Shown> {
                let mut fields = <Self as $crate::settings::declare::Section>::FIELDS.iter();
                vec![
                    $(
                        $crate::settings::declare::Shown {
                            field: *fields.next().expect("one entry per field"),
                            text: $crate::settings::value::Setting::to_text(&self.$field),
                            shown: $crate::settings::value::Setting::show(&self.$field),
                        },
                    )+
                ]
            }
        }

        impl $crate::settings::declare::Flags for $flags {
            fn given(&self) -> Vec<(&'static str, &str)> {
                let mut given = Vec::new();
                $(
                    if let Some(value) = &self.$field {
                        given.push((stringify!($field), value.as_str()));
                    }
                )+
                given
            }
        }
    };
}

pub(crate) use section;
