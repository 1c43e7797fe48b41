use std::{collections::HashMap, time::Duration};

use clap::Parser;
use secrecy::ExposeSecret;

use super::*;
use crate::credentials::{ApiToken, Role};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ConfigArgs,
}

/// The arguments of `quiesce serve <flags>`, as the command line would give them.
fn args(flags: &[&str]) -> ConfigArgs {
    Cli::try_parse_from(std::iter::once("quiesce").chain(flags.iter().copied()))
        .unwrap()
        .args
}

/// Loads with these flags and variables only (not the test process's environment).
fn load(flags: &[&str], environment: &[(&str, &str)]) -> Result<Loaded, ConfigError> {
    let environment: HashMap<String, String> = environment
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Loaded::load(&args(flags), &|name| environment.get(name).cloned())
}

fn error(flags: &[&str], environment: &[(&str, &str)]) -> String {
    load(flags, environment).err().unwrap().to_string()
}

/// A config file in a directory of its own, removed on drop.
struct ConfigFile(std::path::PathBuf);

impl ConfigFile {
    fn new(text: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("quiesce-config-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("quiesce.toml");
        std::fs::write(&file, text).unwrap();
        Self(file)
    }

    fn write(&self, text: &str) {
        std::fs::write(&self.0, text).unwrap();
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
    }
}

#[test]
fn an_invalid_value_names_its_variable() {
    let err = error(&["--max-wait", "soon"], &[]);
    assert!(err.contains("QUIESCE_MAX_WAIT"), "{err}");
    let err = error(&["--workers", "0"], &[]);
    assert!(err.contains("QUIESCE_WORKERS"), "{err}");
}

#[test]
fn flags_override_the_file_which_overrides_defaults() {
    let file = ConfigFile::new("max_wait = \"5m\"\ndebounce_window = \"30s\"\nworkers = 4\n");
    let settings = load(&["--config", file.path(), "--debounce-window", "1s"], &[])
        .unwrap()
        .settings;
    assert_eq!(settings.schedule.max_wait, Duration::from_secs(300));
    assert_eq!(settings.schedule.debounce_window, Duration::from_secs(1));
    assert_eq!(settings.worker.workers, 4);
    assert_eq!(settings.http.listen, Http::default().listen);

    file.write("max_wiat = \"5m\"\n");
    let err = error(&["--config", file.path()], &[]);
    assert!(err.contains("max_wiat"), "{err}");
}

#[test]
fn max_wait_shorter_than_the_window_is_refused() {
    let err = error(&["--debounce-window", "10s", "--max-wait", "5s"], &[]);
    assert!(err.contains("QUIESCE_MAX_WAIT"), "{err}");
}

#[test]
fn values_from_the_file_are_checked_too() {
    let file = ConfigFile::new("max_batch = 0\n");
    let err = error(&["--config", file.path()], &[]);
    assert!(err.contains("QUIESCE_MAX_BATCH"), "{err}");
}

#[test]
fn sources_come_from_name_secret_pairs_and_errors_never_echo_a_secret() {
    let sources = "shop=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, shop=whsec_QVFBQUFBQUFBQUFBQUFBQUFBQUE=,forum=github:hunter2-secret";
    let settings = load(&["--sources", sources], &[]).unwrap().settings;
    let sources = &settings.security.sources;
    assert_eq!(sources.len(), 2);
    assert_eq!(sources[0].name, "shop");
    assert_eq!(sources[0].secrets.len(), 2, "rotation: two secrets");
    assert_eq!(sources[1].github_secrets.len(), 1);
    assert!(!format!("{settings:?}").contains("hunter2-secret"));

    for bad in [
        "Shop=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "shop:hunter2-secret",
        "shop=hunter2-secret",
        "shop=github:",
    ] {
        let err = error(&["--sources", bad], &[]);
        assert!(err.contains("QUIESCE_SOURCES"), "{err}");
        assert!(!err.contains("hunter2-secret"), "{err}");
    }
}

#[test]
fn the_rate_burst_must_fit_a_full_batch_and_metrics_can_be_turned_off() {
    let err = error(&["--rate-burst", "10"], &[]);
    assert!(err.contains("QUIESCE_RATE_BURST"), "{err}");
    let settings = load(&["--metrics-listen", "off"], &[]).unwrap().settings;
    assert_eq!(settings.telemetry.metrics_listen, None);
    assert_eq!(
        Settings::default()
            .telemetry
            .metrics_listen
            .unwrap()
            .to_string(),
        "127.0.0.1:9464"
    );
}

#[test]
fn serve_refuses_an_open_api_unless_insecure_dev_is_chosen() {
    let settings = Settings::default();
    let err = settings.security.check_serving().unwrap_err();
    assert!(
        err.reason().contains("QUIESCE_API_TOKENS")
            && err.reason().contains("QUIESCE_INBOUND_SECRETS"),
        "{err}"
    );
    assert!(err.reason().contains("--insecure-dev"), "{err}");
    let mut dev = Settings::default();
    dev.security.insecure_dev = true;
    assert!(dev.security.check_serving().is_ok());
    let mut configured = Settings::default();
    configured.security.api_tokens =
        vec![ApiToken::parse(&ApiToken::spec_for(Role::Admin, "t")).unwrap()];
    configured.security.inbound_github_secrets = vec![secrecy::SecretString::from("s")];
    assert!(configured.security.check_serving().is_ok());
}

#[test]
fn each_layer_beats_the_one_below_and_says_where_a_value_came_from() {
    let file = ConfigFile::new(
        "workers = 4\n\n[schedule]\nmax_wait = \"5m\"\ndebounce_window = \"30s\"\n",
    );
    let loaded = load(
        &["--config", file.path(), "--workers", "8"],
        &[("QUIESCE_DEBOUNCE_WINDOW", "20s"), ("QUIESCE_WORKERS", "6")],
    )
    .unwrap();
    let settings = &loaded.settings;
    assert_eq!(settings.schedule.max_wait, Duration::from_secs(300));
    assert_eq!(settings.schedule.debounce_window, Duration::from_secs(20));
    assert_eq!(settings.worker.workers, 8);
    let origin = |name: &str| {
        loaded
            .origins()
            .into_iter()
            .find(|(shown, _)| shown.field.name == name)
            .map(|(_, origin)| origin)
            .unwrap()
    };
    assert_eq!(origin("max_wait"), Origin::File(file.0.clone()));
    assert_eq!(origin("debounce_window"), Origin::Environment);
    assert_eq!(origin("workers"), Origin::Flag);
    assert_eq!(origin("shards"), Origin::Default);
    let report = loaded.report();
    assert!(report.contains("[schedule]"), "{report}");
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("workers = 8") && l.ends_with("# flag --workers")),
        "{report}"
    );
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("debounce_window = \"20s\"")
                && l.ends_with("# environment QUIESCE_DEBOUNCE_WINDOW")),
        "{report}"
    );
}

#[test]
fn the_reports_comments_line_up_within_each_section() {
    let url = "postgres://quiesce@db.internal.example:5432/quiesce_production_main";
    let report = load(&[], &[("QUIESCE_DATABASE_URL", url)])
        .unwrap()
        .report();
    // Each section's `#` column, and its longest setting line.
    let mut sections: Vec<(String, Vec<usize>, usize)> = Vec::new();
    for line in report.lines() {
        if line.starts_with('[') {
            sections.push((line.to_owned(), Vec::new(), 0));
        } else if let (Some(section), Some(at)) = (sections.last_mut(), line.find("  # ")) {
            section.1.push(at + 2);
            section.2 = section.2.max(line[..at].trim_end().len());
        }
    }
    for (name, columns, longest) in &sections {
        assert!(
            columns.iter().all(|c| *c == longest + 2),
            "{name}: comments at {columns:?}, longest line {longest}\n{report}"
        );
    }
    // The long URL widens its own section only: the schedule's comments stay where the
    // settings reference shows them (docs/reference/settings.md).
    let schedule = sections.iter().find(|s| s.0 == "[schedule]").unwrap();
    let database = sections.iter().find(|s| s.0 == "[database]").unwrap();
    assert!(database.1[0] > url.len(), "{report}");
    assert!(schedule.1[0] < 30, "{report}");
}

#[test]
fn a_file_key_may_be_sectioned_or_flat_but_not_both_nor_misplaced() {
    let both = ConfigFile::new("max_wait = \"5m\"\n[schedule]\nmax_wait = \"6m\"\n");
    let err = error(&["--config", both.path()], &[]);
    assert!(err.contains("max_wait") && err.contains("twice"), "{err}");
    let misplaced = ConfigFile::new("[redis]\nmax_wait = \"5m\"\n");
    let err = error(&["--config", misplaced.path()], &[]);
    assert!(err.contains("[redis]") && err.contains("max_wait"), "{err}");
    let sources = ConfigFile::new(
        "[[sources]]\nname = \"shop\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\nrate_limit = 2000\n",
    );
    let settings = load(&["--config", sources.path()], &[]).unwrap().settings;
    assert_eq!(settings.security.sources[0].rate_limit, Some(2000));
}

#[test]
fn the_report_and_errors_never_show_a_secret() {
    let loaded = load(
        &[],
        &[
            (
                "QUIESCE_DATABASE_URL",
                "postgres://app:hunter2-secret@db/quiesce",
            ),
            ("QUIESCE_INBOUND_GITHUB_SECRETS", "hunter2-secret"),
            (
                "QUIESCE_WEBHOOK_SECRET",
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            ),
        ],
    )
    .unwrap();
    let report = loaded.report();
    assert!(!report.contains("hunter2-secret"), "{report}");
    assert!(
        !report.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        "{report}"
    );
    // The address stays, so a user can tell which database they are on; the password goes.
    assert!(
        report.contains("database_url = \"postgres://app:[REDACTED]@db/quiesce\""),
        "{report}"
    );
    let err = error(&[], &[("QUIESCE_WEBHOOK_SECRET", "hunter2-secret")]);
    assert!(
        err.contains("QUIESCE_WEBHOOK_SECRET") && !err.contains("hunter2"),
        "{err}"
    );
}

#[test]
fn defaults_and_the_environment_export_read_back_as_they_were() {
    let loaded = load(&[], &[]).unwrap();
    let texts = |settings: &Settings| -> Vec<Option<String>> {
        settings.shown().into_iter().map(|s| s.text).collect()
    };
    assert_eq!(texts(&loaded.settings), texts(&Settings::default()));

    let mut changed = Settings::default();
    changed.schedule.max_wait = Duration::from_millis(1_800_500);
    changed.telemetry.metrics_listen = None;
    changed.security.inbound_github_secrets = vec![secrecy::SecretString::from("s3cret")];
    let environment = changed.to_environment();
    let names: Vec<&str> = environment.iter().map(|(k, _)| k.as_str()).collect();
    assert!(names.contains(&"QUIESCE_MAX_WAIT"), "{names:?}");
    let pairs: Vec<(&str, &str)> = environment
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let reread = load(&[], &pairs).unwrap().settings;
    assert_eq!(texts(&reread), texts(&changed));
    assert_eq!(
        reread.security.inbound_github_secrets[0].expose_secret(),
        "s3cret"
    );
}

#[test]
fn every_setting_has_its_own_name_variable_and_flag() {
    let fields = Settings::fields();
    let mut names: Vec<&str> = fields.iter().map(|f| f.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), fields.len(), "two settings share a name");
    for field in &fields {
        assert!(
            !fields.iter().any(|f| f.section == field.name),
            "{} is both a section and a setting",
            field.name
        );
        assert!(!field.doc.trim().is_empty(), "{} has no doc", field.name);
    }
    // The flags clap builds are the ones the names give.
    let help = {
        use clap::CommandFactory;
        Cli::command().render_long_help().to_string()
    };
    for field in &fields {
        assert!(
            help.contains(&format!("--{}", field.flag())),
            "--{}",
            field.flag()
        );
        assert!(help.contains(&field.variable()), "{}", field.variable());
    }
}

#[test]
fn the_settings_reference_lists_every_setting_with_its_section_variable_flag_and_default() {
    let readme = include_str!("../../docs/reference/settings.md");
    let rows: HashMap<&str, Vec<&str>> = readme
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line
                .split(" | ")
                .map(|c| c.trim_matches('|').trim())
                .collect();
            (cells[0].trim_matches('`'), cells)
        })
        .collect();
    for shown in Settings::default().shown() {
        let field = shown.field;
        let row = rows
            .get(field.name)
            .unwrap_or_else(|| panic!("docs/reference/settings.md has no row for {}", field.name));
        assert_eq!(row[1], format!("`[{}]`", field.section), "{}", field.name);
        assert_eq!(row[2], format!("`{}`", field.variable()), "{}", field.name);
        assert_eq!(row[3], format!("`--{}`", field.flag()), "{}", field.name);
        // A default written as code is the declared one; others are described in words.
        if let Some(default) = row[4].strip_prefix('`').and_then(|d| d.strip_suffix('`'))
            && !default.starts_with('<')
        {
            let declared = shown.text.unwrap_or_default();
            match (
                humantime::parse_duration(default),
                humantime::parse_duration(&declared),
            ) {
                (Ok(readme), Ok(declared)) => assert_eq!(readme, declared, "{}", field.name),
                _ => assert_eq!(default, declared, "{}", field.name),
            }
        }
    }
}

/// The four ways a startup error used to print a secret: a source's secret without `name=` (its
/// base64 padding taken for the `=`), a secret as a string in the file, an unquoted database URL
/// in the file, and a webhook URL with a password that fails its check.
#[test]
fn no_error_echoes_a_secret_a_password_or_a_line_that_holds_one() {
    let secret = "whsec_aHVudGVyMi1zZWNyZXQtdmFsdWU=";
    let secret_body = "aHVudGVyMi1zZWNyZXQtdmFsdWU";
    for sources in [secret.to_owned(), format!("shop={secret},{secret}")] {
        let err = error(&[], &[("QUIESCE_SOURCES", &sources)]);
        assert!(err.contains("QUIESCE_SOURCES"), "{err}");
        assert!(!err.contains(secret_body), "{err}");
    }

    for text in [
        format!("inbound_secrets = \"{secret}\"\n"),
        format!("inbound_secrets = \"{secret}x\"\n"),
        format!("inbound_secrets = \"{secret}\n"),
        format!("inbound_secrets = {secret}\n"),
        format!("[security]\ninbound_secrets = \"{secret}\"\nsources = \"{secret}\"\n"),
        format!("[[sources]]\nname = \"{secret}\"\nsecrets = [\"{secret}\"]\n"),
        format!("[[sources]]\nname = \"shop\"\nsecrets = \"{secret}\"\n"),
        format!("webhook_secret = \"{secret}x\"\n"),
        "database_url = postgres://app:hunter2-secret@db/quiesce\n".to_owned(),
        "database_url = 'postgres://app:hunter2-secret@db/quiesce\n".to_owned(),
        "[database]\ndatabase_url = postgres://app:hunter2-secret@db/quiesce\n".to_owned(),
        "redis_url = redis://:hunter2-secret@cache:6379\n".to_owned(),
        "webhook_url = \"htps://u:hunter2-secret@h/x\"\n".to_owned(),
        "webhook_url = htps://u:hunter2-secret@h/x\n".to_owned(),
    ] {
        let file = ConfigFile::new(&text);
        // The first run reads the file; a run that fails only later would need a second
        // error to be sure: the file must be refused or every value in it accepted.
        if let Err(err) = load(&["--config", file.path()], &[]) {
            let err = err.to_string();
            assert!(!err.contains(secret_body), "{text}: {err}");
            assert!(!err.contains("hunter2-secret"), "{text}: {err}");
        }
    }

    let err = error(
        &[],
        &[("QUIESCE_WEBHOOK_URL", "htps://u:hunter2-secret@h/x")],
    );
    assert!(err.contains("QUIESCE_WEBHOOK_URL"), "{err}");
    assert!(!err.contains("hunter2-secret"), "{err}");
    assert!(err.contains("htps://u:[REDACTED]@h/x"), "{err}");
}

#[test]
fn file_errors_name_the_key_and_its_line() {
    let file = ConfigFile::new("# workers\n\nwrokers = 64\n");
    let err = error(&["--config", file.path()], &[]);
    assert!(err.contains("unknown key wrokers (line 3)"), "{err}");

    file.write("[schedule]\nmax_wait = \"5m\"\n\n[worker]\nworkers = 8\nbogus = 1\n");
    let err = error(&["--config", file.path()], &[]);
    assert!(
        err.contains("[worker] has no setting bogus (line 6)"),
        "{err}"
    );

    file.write("workers = 8\n[worker]\nworkers = 9\n");
    let err = error(&["--config", file.path()], &[]);
    assert!(
        err.contains("workers is given twice: at the top level (line 1) and in [worker] (line 3)"),
        "{err}"
    );
}

#[test]
fn the_rules_default_to_the_shipped_file_when_it_is_there() {
    // Tests run in the crate's root, which has rules/default.toml.
    let settings = load(&[], &[]).unwrap().settings;
    assert_eq!(
        settings.moderation.rules,
        RulesSource::File(SHIPPED_RULES.into())
    );
    let built_in = load(&["--rules", "built-in"], &[]).unwrap().settings;
    assert_eq!(built_in.moderation.rules, RulesSource::BuiltIn);
    assert!(built_in.moderation.rules.file().is_none());
}
