//! The commands of the README and of every page of docs/, run as printed, in order, against a
//! running `make run` (`scripts/dev/smoke-make-run.sh` starts it and runs this test, so `make
//! test` and CI run it). The pages run in the order of [`PAGES`] (docs/README.md states it and
//! why); a page with a command that is not in it fails
//! `every_page_with_commands_is_in_the_smoke_order`.
//!
//! Every ```` ```sh ```` block of a page runs with `bash -euo pipefail`, unless the line
//! before it is `<!-- readme: skip REASON -->`. A block whose line before it is
//! `<!-- readme: output MODE -->` is what the last command block printed, checked by MODE:
//! - `json`: the same JSON value;
//! - `shape`: JSON with the same keys at every level (values differ from run to run);
//! - `lines`: each of its lines, but `...`, appears in the output in that order, with every
//!   number read as any number and runs of spaces as one;
//! - `exact`: as `lines`, but every number as printed; a line ending in ` ...` matches a
//!   printed line that begins with what comes before it (for a figure that differs from run
//!   to run, such as a time or a rate, left out).
//!
//! The only changes to a command are the addresses of this run's instance: the API's
//! `http://127.0.0.1:8080`, the metrics listener's `http://127.0.0.1:9464` and the database
//! `postgres://postgres@127.0.0.1:5432/quiesce` become `README_API`, `README_METRICS` and
//! `README_DATABASE_URL`. Blocks run in a scratch folder that links the checkout's `rules/` and
//! `target/`, so the files they write are not left behind, with the build's `target/debug` first
//! on `PATH`, so that a runbook's `quiesce` is this build.
//!
//! Two lists of the README are also held to the code, so that neither drifts: the webhook
//! types (every topic of `domain::Topic` the platform receives, both ways) and the role table
//! (every `/v1` route of the OpenAPI document, under the role the token check asks).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use quiesce::domain::{Receiver, Topic};
use utoipa::OpenApi;

#[path = "support/pages.rs"]
mod support;

/// The pages whose commands the smoke test runs, in the order it runs them: the README's quick
/// start, the reference, the how-to guides, then the tutorial. The backtest guide prints figures
/// that count every evaluation made before it, so the pages that make evaluations of their own
/// (the appeal's post, the tutorial's) come after it; the runbooks' read-only steps last.
const PAGES: [&str; 11] = [
    "README.md",
    "docs/reference/http-api.md",
    "docs/reference/console.md",
    "docs/reference/settings.md",
    "docs/reference/rules.md",
    "docs/how-to/publish-rules.md",
    "docs/how-to/backtest.md",
    "docs/how-to/statements-and-appeals.md",
    "docs/how-to/dead-letters.md",
    "docs/tutorial/first-platform.md",
    "docs/operations.md",
];

/// One fenced block of a page and how the test treats it.
#[derive(Debug)]
struct Block {
    line: usize,
    kind: Kind,
    text: String,
}

#[derive(Debug, PartialEq)]
enum Kind {
    Run,
    Skip,
    Output(Mode),
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Json,
    Shape,
    Lines,
    Exact,
}

fn blocks(readme: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = readme.lines().enumerate();
    let mut marker: Option<&str> = None;
    while let Some((number, line)) = lines.next() {
        let trimmed = line.trim();
        if let Some(info) = trimmed.strip_prefix("```") {
            let mut text = String::new();
            for (_, inner) in lines.by_ref() {
                if inner.trim_start().starts_with("```") {
                    break;
                }
                text.push_str(inner);
                text.push('\n');
            }
            let kind = match (marker.take(), info.trim()) {
                (Some(m), _) if m.starts_with("skip") => Kind::Skip,
                (Some(m), _) if m.starts_with("output") => {
                    Kind::Output(match m.trim_start_matches("output").trim() {
                        "json" => Mode::Json,
                        "shape" => Mode::Shape,
                        "lines" => Mode::Lines,
                        "exact" => Mode::Exact,
                        other => panic!("line {}: unknown output mode {other:?}", number),
                    })
                }
                (Some(m), _) => panic!("line {number}: unknown marker {m:?}"),
                (None, "sh") => Kind::Run,
                (None, _) => Kind::Other,
            };
            blocks.push(Block {
                line: number + 2,
                kind,
                text,
            });
        } else if let Some(m) = trimmed
            .strip_prefix("<!-- readme:")
            .and_then(|m| m.strip_suffix("-->"))
        {
            marker = Some(m.trim());
        } else if !trimmed.is_empty() {
            marker = None;
        }
    }
    blocks
}

/// The output normalised for `lines`: numbers as `0`, runs of blanks as one space.
fn normalise(line: &str) -> String {
    let line = normalise_blanks(line);
    let mut out = String::new();
    let mut last = ' ';
    for c in line.chars() {
        let c = if c.is_ascii_digit() { '0' } else { c };
        if c == '0' && last == '0' {
            continue;
        }
        out.push(c);
        last = c;
    }
    out
}

/// The output normalised for `exact`: runs of blanks as one space.
fn normalise_blanks(line: &str) -> String {
    let mut out = String::new();
    let mut last = ' ';
    for c in line.trim().chars() {
        let c = if c.is_whitespace() { ' ' } else { c };
        if c == ' ' && last == ' ' {
            continue;
        }
        out.push(c);
        last = c;
    }
    out
}

/// Whether a printed line is the wanted one of an `exact` block: the same, or, for a wanted
/// line ending in ` ...`, one that begins with what comes before it.
fn matches_exactly(wanted: &str, printed: &str) -> bool {
    let (wanted, printed) = (normalise_blanks(wanted), normalise_blanks(printed));
    match wanted.strip_suffix(" ...") {
        Some(start) => printed.starts_with(start),
        None => printed == wanted,
    }
}

fn same_shape(expected: &serde_json::Value, actual: &serde_json::Value, path: &str) {
    use serde_json::Value;
    if let (Value::Object(e), Value::Object(a)) = (expected, actual) {
        let mut ek: Vec<_> = e.keys().collect();
        let mut ak: Vec<_> = a.keys().collect();
        ek.sort();
        ak.sort();
        assert_eq!(ek, ak, "keys of {path}");
        for (key, value) in e {
            same_shape(value, &a[key], &format!("{path}.{key}"));
        }
    }
}

/// Checks `output` against an output block; `at` is the command's page and line.
fn check(mode: Mode, expected: &str, output: &str, at: &str) {
    match mode {
        Mode::Json => {
            let expected: serde_json::Value = serde_json::from_str(expected).unwrap();
            let actual: serde_json::Value = serde_json::from_str(output)
                .unwrap_or_else(|e| panic!("{at}: not JSON ({e}): {output}"));
            assert_eq!(actual, expected, "{at}");
        }
        Mode::Shape => {
            let expected: serde_json::Value = serde_json::from_str(expected).unwrap();
            let actual: serde_json::Value = serde_json::from_str(output)
                .unwrap_or_else(|e| panic!("{at}: not JSON ({e}): {output}"));
            same_shape(&expected, &actual, "$");
        }
        Mode::Lines | Mode::Exact => {
            let mut printed = output.lines();
            for wanted in expected.lines().filter(|l| l.trim() != "...") {
                let found = printed.any(|printed| match mode {
                    Mode::Exact => matches_exactly(wanted, printed),
                    _ => normalise(printed) == normalise(wanted),
                });
                assert!(
                    found,
                    "{at}: the output lacks {wanted:?} (in this order, {mode:?}); it was:\n{output}"
                );
            }
        }
    }
}

/// A scratch folder holding links to the checkout's rules and build.
fn scratch(root: &Path) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quiesce-readme-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["rules", "target"] {
        std::os::unix::fs::symlink(root.join(name), dir.join(name)).unwrap();
    }
    dir
}

#[test]
fn markers_are_read_and_numbers_compare_as_any_number() {
    let readme = "text\n<!-- readme: skip starts a server -->\n```sh\nmake run\n```\n\
                  ```sh\ncurl x\n```\nprose\n<!-- readme: output json -->\n```json\n{}\n```\n";
    let kinds: Vec<_> = blocks(readme).into_iter().map(|b| b.kind).collect();
    assert_eq!(kinds, [Kind::Skip, Kind::Run, Kind::Output(Mode::Json)]);
    assert_eq!(normalise("a  12 of 3.5"), normalise("a 7 of  10.25"));
    assert_ne!(normalise("12 rules"), normalise("12 rule"));
}

#[test]
fn exact_output_compares_every_number_but_after_a_trailing_ellipsis() {
    let output = "saved  1   of 14\nevaluations: 459, 1 pages, 0.3 s\n";
    check(Mode::Exact, "saved 1 of 14\n...\n", output, "a line");
    check(
        Mode::Exact,
        "evaluations: 459, 1 pages, ...\n",
        output,
        "a line",
    );
    assert!(!matches_exactly("saved 2 of 14", "saved  1   of 14"));
    assert!(!matches_exactly(
        "evaluations: 458, ...",
        "evaluations: 459, 1 pages"
    ));
    assert!(matches_exactly("a  b", " a b "));
}

#[test]
#[ignore = "needs a running make run: scripts/dev/smoke-make-run.sh runs it"]
fn every_documented_command_runs_as_printed() {
    let api = std::env::var("README_API").expect("README_API: the make run instance's base URL");
    let database =
        std::env::var("README_DATABASE_URL").expect("README_DATABASE_URL: its database URL");
    let metrics =
        std::env::var("README_METRICS").expect("README_METRICS: its metrics listener's base URL");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = scratch(&root);
    let path = format!(
        "{}:{}",
        root.join("target/debug").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for page in PAGES {
        let text = std::fs::read_to_string(root.join(page)).unwrap();
        // An output block reads the command before it on its own page.
        let mut last: Option<(String, String)> = None;
        for block in blocks(&text) {
            let at = format!("{page} line {}", block.line);
            match block.kind {
                Kind::Run => {
                    let script = block
                        .text
                        .replace("http://127.0.0.1:8080", &api)
                        .replace("http://127.0.0.1:9464", &metrics)
                        .replace("postgres://postgres@127.0.0.1:5432/quiesce", &database);
                    eprintln!("{at}:\n{script}");
                    let started = Instant::now();
                    let output = Command::new("timeout")
                        .args(["300", "bash", "-euo", "pipefail", "-c", &script])
                        .current_dir(&dir)
                        .env("PATH", &path)
                        .output()
                        .expect("bash");
                    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
                    assert!(
                        output.status.success(),
                        "{at}: {} after {:?}\nstdout:\n{stdout}\nstderr:\n{}",
                        output.status,
                        started.elapsed(),
                        String::from_utf8_lossy(&output.stderr)
                    );
                    ran += 1;
                    last = Some((at, stdout));
                }
                Kind::Output(mode) => {
                    let (at, stdout) = last
                        .take()
                        .unwrap_or_else(|| panic!("{at}: output of no command"));
                    check(mode, &block.text, &stdout, &at);
                }
                Kind::Skip | Kind::Other => {}
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(ran >= 35, "only {ran} blocks ran");
}

/// README.md and every page under docs/, as paths from the checkout's root.
fn pages() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    support::pages(root)
        .iter()
        .map(|page| {
            page.strip_prefix(root)
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn every_page_with_commands_is_in_the_smoke_order() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let all = pages();
    assert!(all.len() > PAGES.len(), "{all:?}");
    for page in &all {
        let text = std::fs::read_to_string(root.join(page)).unwrap();
        // Every marker is read (an unknown one panics), on every page.
        let blocks = blocks(&text);
        let runs: Vec<usize> = blocks
            .iter()
            .filter(|b| b.kind == Kind::Run)
            .map(|b| b.line)
            .collect();
        let listed = PAGES.contains(&page.as_str());
        assert!(
            runs.is_empty() || listed,
            "{page} has sh blocks at lines {runs:?} that the smoke test would not run: add the page to PAGES \
             (tests/readme.rs, and the order in docs/README.md), or mark each block \
             `<!-- readme: skip REASON -->`"
        );
        // The list does not rot: each page of it exists and has a command to run.
        assert!(
            !listed || !runs.is_empty(),
            "{page} is in PAGES but runs nothing"
        );
    }
    for page in PAGES {
        assert!(
            all.iter().any(|p| p == page),
            "{page} of PAGES does not exist"
        );
    }
}

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

/// The types the README's Outbound webhooks section lists in its body line
/// (`{"type": "a" | "b", ...}`).
fn readme_webhook_types(readme: &str) -> BTreeSet<String> {
    let section = &readme[readme
        .find("## Outbound webhooks")
        .expect("the webhooks section")..];
    let line = section
        .lines()
        .find(|line| line.starts_with("{\"type\":"))
        .expect("the webhook body line");
    let types = line["{\"type\":".len()..]
        .split(", \"timestamp\"")
        .next()
        .unwrap();
    types
        .split('|')
        .map(|t| t.trim().trim_matches('"').to_owned())
        .collect()
}

#[test]
fn the_webhooks_the_readme_lists_are_the_topics_the_platform_receives() {
    let topics: BTreeSet<String> = Topic::ALL
        .into_iter()
        .filter(|topic| topic.receiver() == Receiver::Platform)
        .map(|topic| topic.name().to_owned())
        .collect();
    // The Transparency Database's rows are no webhook.
    assert!(
        !topics.contains(Topic::StatementSubmitted.name()),
        "{topics:?}"
    );
    assert_eq!(readme_webhook_types(&readme()), topics);
}

#[test]
fn the_readme_webhook_line_is_read_type_by_type() {
    let readme = "## Outbound webhooks\n\n{\"type\": \"a.b\" | \"c.d\", \"timestamp\": \"...\"}\n";
    assert_eq!(
        readme_webhook_types(readme),
        ["a.b", "c.d"].map(String::from).into()
    );
}

/// The README's role table: each role and the routes (`METHOD /path`) its row names.
fn readme_roles(readme: &str) -> BTreeMap<String, BTreeSet<(String, String)>> {
    let route = regex::Regex::new(r"`(GET|POST|PUT|PATCH|DELETE) (/[^`?]*)`").unwrap();
    let table = &readme[readme.find("| Role | May |").expect("the role table")..];
    let mut roles = BTreeMap::new();
    for line in table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
    {
        let mut cells = line.split('|').skip(1);
        let role = cells.next().unwrap().trim().trim_matches('`').to_owned();
        let routes = route
            .captures_iter(cells.next().unwrap())
            .map(|c| (c[1].to_owned(), c[2].to_owned()))
            .collect();
        roles.insert(role, routes);
    }
    roles
}

#[test]
fn the_readme_role_table_names_every_route_under_the_role_it_needs() {
    let readme = readme();
    let table = readme_roles(&readme);
    assert_eq!(
        table.keys().map(String::as_str).collect::<Vec<_>>(),
        ["admin", "ingest", "moderator"]
    );
    let doc = serde_json::to_value(quiesce::http::openapi::ApiDoc::openapi()).unwrap();
    let mut needed: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let method = method.to_uppercase();
            let parsed = axum::http::Method::from_bytes(method.as_bytes()).unwrap();
            if let Some(role) = quiesce::http::auth::required_role(&parsed, path) {
                needed
                    .entry(role.as_str().to_owned())
                    .or_default()
                    .insert((method, path.clone()));
            }
        }
    }
    assert_eq!(
        table, needed,
        "the README's role table against the token check"
    );
}
