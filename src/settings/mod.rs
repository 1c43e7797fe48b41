//! Settings, each declared once, in the file of its section, with its doc, default and check.
//! They come in layers merged by figment: built-in defaults, then an optional TOML file
//! (`--config`), then `QUIESCE_*` environment variables, then flags (a flag beats its variable,
//! which beats the file). A setting's variable and flag are derived from its name.
//!
//! A new setting is one field in its section's `section!` block: the struct, its default, the
//! flag, the variable, the file key, `--help` and `quiesce config` all follow from it.

mod console;
mod database;
pub(crate) mod declare;
mod delivery;
mod field;
mod http;
pub(crate) mod layers;
mod maintenance;
mod moderation;
mod redis;
mod report;
mod schedule;
mod security;
mod telemetry;
pub(crate) mod value;
mod worker;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use self::{
    console::{Console, ConsoleFlags, SecureCookie, TrustedProxies},
    database::{Database, DatabaseFlags},
    declare::Shown,
    delivery::{Delivery, DeliveryFlags},
    http::{Http, HttpFlags},
    layers::Origin,
    maintenance::{Maintenance, MaintenanceFlags},
    moderation::{Moderation, ModerationFlags, RulesSource, SHIPPED_RULES},
    redis::{Redis, RedisFlags},
    schedule::{Schedule, ScheduleFlags},
    security::{Security, SecurityFlags, Source},
    telemetry::{Telemetry, TelemetryFlags},
    value::InvalidValue,
    worker::{Worker, WorkerFlags},
};
use self::{
    declare::{Flags, Section},
    field::{Field, names},
    layers::Layers,
};

/// The shortest retention (a retention pass must keep up with it on its own, and ids must
/// outlast senders' retries)...
pub const MIN_RETENTION: std::time::Duration = std::time::Duration::from_secs(3600);
/// ...and the shortest `test_short_retention` allows, for the retention run and tests.
pub const MIN_TEST_RETENTION: std::time::Duration = std::time::Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    ReadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {reason}")]
    File { path: PathBuf, reason: String },
    /// A value that does not parse or fails its check; `value` is empty for a secret.
    #[error("invalid {variable} ({names}){value} from {origin}: {reason}")]
    Invalid {
        variable: String,
        names: String,
        value: String,
        origin: String,
        reason: String,
    },
    /// A value that contradicts another one.
    #[error("invalid {variable} ({names}): {reason}")]
    Inconsistent {
        variable: String,
        names: String,
        reason: String,
    },
}

impl ConfigError {
    /// The field's value is refused for `reason`, whichever layer set it.
    pub(crate) fn conflict(field: &Field, reason: impl Into<String>) -> Self {
        ConfigError::Inconsistent {
            variable: field.variable(),
            names: names(field),
            reason: reason.into(),
        }
    }
}

/// Declares the sections: the settings struct, the flags of all of them, and the walks over
/// every field that loading, checking and `quiesce config` make.
macro_rules! sections {
    ($($section:ident: $ty:ident, $flags:ident;)+) => {
        /// Every setting, by section.
        #[derive(Debug, Clone, Default)]
        pub struct Settings {
            $(pub $section: $ty,)+
        }

        /// The flags of every setting, and the config file.
        #[derive(Debug, Clone, Default, clap::Args)]
        pub struct ConfigArgs {
            /// TOML file with any of the settings: keys in their section's table
            /// (`[schedule]` with `max_wait = "2m"`) or at the top level; `quiesce config`
            /// lists them.
            #[arg(long, env = "QUIESCE_CONFIG", value_name = "FILE")]
            pub config: Option<PathBuf>,
            $(
                #[command(flatten)]
                pub $section: $flags,
            )+
        }

        impl Settings {
            /// Every declared setting, section by section.
            pub fn fields() -> Vec<Field> {
                let mut fields = Vec::new();
                $(fields.extend_from_slice(<$ty as Section>::FIELDS);)+
                fields
            }

            fn read(layers: &Layers) -> Result<Self, ConfigError> {
                Ok(Self { $($section: <$ty as Section>::read(layers)?,)+ })
            }

            fn check_fields(&self) -> Result<(), ConfigError> {
                $(self.$section.check()?;)+
                Ok(())
            }

            /// Every setting's value, section by section (secrets redacted in `shown`).
            pub fn shown(&self) -> Vec<Shown> {
                let mut shown = Vec::new();
                $(shown.extend(self.$section.shown());)+
                shown
            }
        }

        impl ConfigArgs {
            /// The flags given, by field.
            fn given(&self) -> Vec<(Field, String)> {
                let mut given = Vec::new();
                $(
                    for (name, value) in self.$section.given() {
                        let field = <$ty as Section>::FIELDS
                            .iter()
                            .find(|f| f.name == name)
                            .expect("a flag of the section");
                        given.push((*field, value.to_owned()));
                    }
                )+
                given
            }
        }
    };
}

sections! {
    database: Database, DatabaseFlags;
    redis: Redis, RedisFlags;
    http: Http, HttpFlags;
    schedule: Schedule, ScheduleFlags;
    worker: Worker, WorkerFlags;
    maintenance: Maintenance, MaintenanceFlags;
    delivery: Delivery, DeliveryFlags;
    security: Security, SecurityFlags;
    moderation: Moderation, ModerationFlags;
    telemetry: Telemetry, TelemetryFlags;
    console: Console, ConsoleFlags;
}

/// Settings as loaded, with the layers they came from.
pub struct Loaded {
    pub settings: Settings,
    layers: Layers,
}

impl Loaded {
    /// Defaults, then the file named by `--config`, then the variables `environment` answers
    /// for, then flags; every value checked, and the relations between them.
    pub fn load(
        args: &ConfigArgs,
        environment: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let fields = Settings::fields();
        let defaults = Settings::default()
            .shown()
            .into_iter()
            .filter_map(|shown| shown.text.map(|text| (shown.field, text)));
        let layers = Layers::new(
            &fields,
            defaults,
            args.config.as_deref(),
            environment,
            args.given(),
        )?;
        let settings = Settings::read(&layers)?;
        settings.check_relations()?;
        Ok(Self { settings, layers })
    }

    /// Each setting with its value (secrets redacted) and where it came from.
    pub fn origins(&self) -> Vec<(Shown, Origin)> {
        self.settings
            .shown()
            .into_iter()
            .map(|shown| {
                let origin = self.layers.origin(&shown.field);
                (shown, origin)
            })
            .collect()
    }
}

impl Settings {
    /// Loads the settings from the process environment and `args`.
    pub fn load(args: &ConfigArgs) -> Result<Self, ConfigError> {
        Loaded::load(args, &|name| std::env::var(name).ok()).map(|loaded| loaded.settings)
    }

    /// Checks every value and the relations between them: what loading checks, for settings
    /// built in code.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_fields()?;
        self.check_relations()
    }

    /// The settings as `QUIESCE_*` variables, secrets included: what a child process needs to
    /// run with the same settings (per-source rates excepted, which only a file can carry).
    pub fn to_environment(&self) -> Vec<(String, String)> {
        self.shown()
            .into_iter()
            .filter_map(|shown| shown.text.map(|text| (shown.field.variable(), text)))
            .collect()
    }

    /// Relations between settings, each reported on the setting to change.
    fn check_relations(&self) -> Result<(), ConfigError> {
        let fail = |name: &str, reason: &str| {
            let field = Settings::fields()
                .into_iter()
                .find(|f| f.name == name)
                .expect("a declared setting");
            Err(ConfigError::conflict(&field, reason))
        };
        let (schedule, http) = (&self.schedule, &self.http);
        let backend_timeout = self.database.backend_timeout;
        if schedule.max_wait < schedule.debounce_window {
            return fail("max_wait", "must be at least the debounce window");
        }
        if schedule.backoff_max < schedule.backoff_base {
            return fail("backoff_max", "must be at least the backoff base");
        }
        let maintenance = &self.maintenance;
        let least = if maintenance.test_short_retention {
            MIN_TEST_RETENTION
        } else {
            MIN_RETENTION
        };
        if maintenance.retention < least {
            return fail(
                "retention",
                if maintenance.test_short_retention {
                    "must be at least 1m, even with test_short_retention"
                } else {
                    "must be at least 1h (test_short_retention allows minutes, for tests only)"
                },
            );
        }
        if maintenance.audit_retention < std::time::Duration::from_secs(24 * 3600) {
            return fail("audit_retention", "must be at least 1 day");
        }
        if self.maintenance.sweep_grace < backend_timeout {
            return fail(
                "sweep_grace",
                "must be at least the backend timeout (an ingest may take that long to schedule)",
            );
        }
        let smallest_burst = self
            .security
            .sources
            .iter()
            .filter_map(|s| s.rate_burst)
            .chain([http.rate_burst])
            .min()
            .unwrap_or(http.rate_burst);
        if (smallest_burst as usize) < http.max_batch {
            return fail(
                "rate_burst",
                "must be at least max_batch (a full batch could never pass)",
            );
        }
        if http.request_timeout <= backend_timeout {
            return fail(
                "request_timeout",
                "must be longer than the backend timeout (which answers 503 first)",
            );
        }
        let delivery = &self.delivery;
        if delivery.delivery_backoff_max < delivery.delivery_backoff_base {
            return fail(
                "delivery_backoff_max",
                "must be at least the delivery backoff base",
            );
        }
        Ok(())
    }
}
