//! One declared setting as the layers, errors and `quiesce config` see it: its section, its
//! name, and the variable, flag and file key derived from the name.

/// One declared setting, as the layers and `quiesce config` see it.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub section: &'static str,
    pub name: &'static str,
    pub doc: &'static str,
    pub secret: bool,
}

impl Field {
    /// `QUIESCE_MAX_WAIT` for `max_wait`.
    pub fn variable(&self) -> String {
        variable(self.name)
    }

    /// `max-wait` for `max_wait`.
    pub fn flag(&self) -> String {
        self.name.replace('_', "-")
    }

    /// `schedule.max_wait`: where figment finds it.
    pub fn path(&self) -> String {
        format!("{}.{}", self.section, self.name)
    }
}

/// The environment variable of the setting `name`.
pub fn variable(name: &str) -> String {
    format!("QUIESCE_{}", name.to_ascii_uppercase())
}

/// A setting's current value: as the layers would give it, and as `quiesce config` shows it.
#[derive(Debug, Clone)]
pub struct Shown {
    pub field: Field,
    /// `None`: not set (an optional setting).
    pub text: Option<String>,
    pub shown: String,
}

/// `--max-wait, max_wait in [schedule]`: the names a setting goes by besides its variable.
pub fn names(field: &Field) -> String {
    format!("--{}, {} in [{}]", field.flag(), field.name, field.section)
}
