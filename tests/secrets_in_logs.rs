//! No configured secret appears in the logs of a full test run. `make test` runs the suite with
//! `QUIESCE_TEST_LOG_DIR`, where every test and every process it starts logs at debug level,
//! then runs this check (ignored in a plain `cargo test`, which keeps no logs).

#[path = "support/secrets.rs"]
mod secrets;

#[test]
#[ignore = "run by `make test` after the suite, on the logs it wrote"]
fn no_secret_appears_in_the_logs_of_the_test_run() {
    let dir = std::env::var_os("QUIESCE_TEST_LOG_DIR")
        .expect("QUIESCE_TEST_LOG_DIR names the logs of the run to check");
    let mut logs = String::new();
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).expect("the log directory") {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        logs.push_str(&String::from_utf8_lossy(&bytes));
        files += 1;
    }
    // The logs must cover the paths where a secret would leak: refused signatures and tokens,
    // rate limits, workers started as processes, and the server started by `make run`.
    for marker in [
        "invalid_signature",
        "unauthorized",
        "forbidden",
        "rate_limited",
        "quiesce worker started",
        "quiesce is serving",
    ] {
        assert!(
            logs.contains(marker),
            "the run's logs ({files} files, {} bytes) never mention {marker:?}: not a full run",
            logs.len()
        );
    }
    for secret in secrets::ALL {
        let mut forms = vec![secret.to_string()];
        // The key material alone, should something print it without its prefix.
        if let Some(key) = secret.strip_prefix("whsec_") {
            forms.push(key.to_owned());
        }
        for form in forms {
            assert!(
                !logs.contains(&form),
                "a secret ({}...) appears in the logs under {dir:?}",
                &form[..6]
            );
        }
    }
}
