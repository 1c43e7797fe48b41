//! The house's rules, read from the source: no import cycle among the modules of `src/`, none
//! among the files of one module folder, the lower layers never reach up to the use cases, the
//! HTTP layer, the wiring or the workers, the use cases never reach up to the edges, the
//! console never imports the HTTP layer, the store never drives Redis (and offers handles, not
//! statements, `the_store_offers_handles_not_statements`), and the settings never
//! import the queue. References are every `crate::`, `super::` and `self::` path in
//! the code (`use` trees included), resolved to the file that defines the module they name.
//! And the map, docs/architecture.md, is kept true: its modules table names every file under
//! `src/` and no file that is gone, its layers are the ones below, and imports point down it.
//! And no task is detached: a task is started by the supervisor, or in a `JoinSet` its owner
//! reaps, and no join's outcome is thrown away.
//! The two request edges read a route's path one way: through their extractors, which ask the
//! caller's scope (`request/path.rs`), never by hand; every route with a path value takes one.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// Modules every other one may build on; none of them may use an upper one.
const LOWER: [&str; 9] = [
    "domain",
    "credentials",
    "telemetry",
    "coalesce",
    "queue",
    "rules",
    "settings",
    "store",
    "backtest",
];
/// What the lower layers must never import: the use cases and everything above them.
const UPPER: [&str; 17] = [
    "appeals",
    "audit",
    "active_rules",
    "cli",
    "http",
    "console",
    "request",
    "startup",
    "worker",
    "maintenance",
    "ingest",
    "evaluation",
    "moderation",
    "review",
    "dead_letters",
    "actions",
    "loadgen",
];
/// The use cases, between the edges and the stores: each takes the stores it needs.
const USE_CASES: [&str; 9] = [
    "ingest",
    "evaluation",
    "appeals",
    "moderation",
    "review",
    "dead_letters",
    "actions",
    "audit",
    "active_rules",
];
/// The edges, which translate a command, a request or a form into a use-case call: no use case imports
/// one.
const EDGES: [&str; 5] = ["cli", "http", "console", "request", "startup"];

/// Every file below `dir`, Rust or not (the map names the console's assets too).
fn files_under(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, files);
        } else {
            files.push(path);
        }
    }
}

/// The code of a file without comments and string literals, and without its test modules.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]") {
        Some(at) => &text[..at],
        None => &text,
    };
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths of a `use` tree or a path expression starting at `rest` (just after `crate::`).
fn paths(rest: &str) -> Vec<Vec<String>> {
    fn tree(s: &mut std::iter::Peekable<std::str::Chars>, prefix: Vec<String>) -> Vec<Vec<String>> {
        let mut path = prefix;
        loop {
            while s.peek().is_some_and(|c| c.is_whitespace()) {
                s.next();
            }
            if s.peek() == Some(&'{') {
                s.next();
                let mut found = Vec::new();
                loop {
                    found.extend(tree(s, path.clone()));
                    while s.peek().is_some_and(|c| c.is_whitespace()) {
                        s.next();
                    }
                    match s.next() {
                        Some(',') => {
                            while s.peek().is_some_and(|c| c.is_whitespace()) {
                                s.next();
                            }
                            if s.peek() == Some(&'}') {
                                s.next();
                                return found;
                            }
                        }
                        _ => return found,
                    }
                }
            }
            let ident: String =
                std::iter::from_fn(|| s.next_if(|c| c.is_alphanumeric() || *c == '_')).collect();
            if ident.is_empty() {
                return vec![path];
            }
            path.push(ident);
            if s.peek() == Some(&':') {
                s.next();
                s.next();
            } else {
                return vec![path];
            }
        }
    }
    tree(&mut rest.chars().peekable(), Vec::new())
}

/// The file defining the deepest module that `path` names, below `dir`.
fn resolve(dir: &Path, path: &[String]) -> Option<PathBuf> {
    let (mut dir, mut found) = (dir.to_owned(), None);
    for segment in path {
        if dir.join(format!("{segment}.rs")).exists() {
            found = Some(dir.join(format!("{segment}.rs")));
            dir = dir.join(segment);
        } else if dir.join(segment).join("mod.rs").exists() {
            found = Some(dir.join(segment).join("mod.rs"));
            dir = dir.join(segment);
        } else {
            break;
        }
    }
    found
}

/// Every file each file refers to.
fn references(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut files = Vec::new();
    files_under(src, &mut files);
    files.retain(|f| f.extension().is_some_and(|e| e == "rs"));
    let mut graph = BTreeMap::new();
    for file in files {
        let code = code(&file);
        let folder = file.parent().unwrap().to_owned();
        let is_mod = file.ends_with("mod.rs");
        let mut targets = BTreeSet::new();
        for (marker, base) in [
            ("crate::", Some(src.to_owned())),
            // `super` of a folder's file is the folder; of a mod.rs, the folder's parent.
            (
                "super::",
                Some(if is_mod {
                    folder.parent().unwrap().to_owned()
                } else {
                    folder.clone()
                }),
            ),
            ("self::", is_mod.then(|| folder.clone())),
        ] {
            let Some(base) = base else { continue };
            for (at, _) in code.match_indices(marker) {
                let before = code[..at].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                for path in paths(&code[at + marker.len()..]) {
                    let target = resolve(&base, &path)
                        .or_else(|| (base != src).then(|| base.join("mod.rs")));
                    if let Some(target) = target.filter(|t| *t != file && t.exists()) {
                        targets.insert(target);
                    }
                }
            }
        }
        graph.insert(file, targets);
    }
    graph
}

/// A cycle of the graph, if it has one.
fn cycle<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
    fn visit<N: Ord + Clone>(
        node: &N,
        graph: &BTreeMap<N, BTreeSet<N>>,
        path: &mut Vec<N>,
        done: &mut BTreeSet<N>,
    ) -> Option<Vec<N>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.clone());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.clone());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

/// `store` for src/store/events.rs and for src/store.rs.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

/// Which modules each module of `src/` imports; the entry points (main.rs, lib.rs, bin/)
/// are left out, as they may use anything.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let graph = references(src);
    assert!(graph.len() > 40, "read {} files", graph.len());
    let entry_points = ["main", "lib", "bin"];
    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, targets) in &graph {
        let from = module_of(src, file);
        if entry_points.contains(&from.as_str()) {
            continue;
        }
        let entry = modules.entry(from.clone()).or_default();
        for target in targets {
            let to = module_of(src, target);
            if to != from && !entry_points.contains(&to.as_str()) {
                entry.insert(to);
            }
        }
    }
    modules
}

#[test]
fn modules_import_each_other_without_a_cycle_and_only_downwards() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = module_graph(&src);
    assert_eq!(
        cycle(&modules),
        None,
        "an import cycle among the modules of src/"
    );
    // The lower layers never reach up; the use cases never reach up to the edges.
    let floors: [(&[&str], &[&str]); 2] = [(&LOWER, &UPPER), (&USE_CASES, &EDGES)];
    for (layer, above) in floors {
        for module in layer {
            let reaching_up: Vec<&String> = modules[*module]
                .iter()
                .filter(|m| above.contains(&m.as_str()))
                .collect();
            assert!(reaching_up.is_empty(), "{module} imports {reaching_up:?}");
        }
    }
    // The two edges stand side by side: what both use lives below them.
    assert!(
        !modules["console"].contains("http"),
        "console imports http: move what both use to a lower module"
    );
    // Postgres statements and Redis calls meet in the use cases, never in the store.
    assert!(
        !modules["store"].contains("queue"),
        "store imports queue: what spans both belongs to a use case"
    );
    // The settings declare values; they know nothing of the Redis schedule that uses some.
    assert!(
        !modules["settings"].contains("queue"),
        "settings imports queue: move the shared value to domain"
    );
    // Modules are known to the rules: a new one must be placed in a layer.
    for module in modules.keys() {
        assert!(
            LOWER.contains(&module.as_str()) || UPPER.contains(&module.as_str()),
            "{module} is in no layer"
        );
    }
}

#[test]
fn the_files_of_a_module_import_each_other_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // Within a folder, between its files; a folder's mod.rs declares and re-exports them,
    // which is no import of theirs.
    let files: BTreeMap<PathBuf, BTreeSet<PathBuf>> = references(&src)
        .into_iter()
        .filter(|(file, _)| !file.ends_with("mod.rs"))
        .map(|(file, targets)| {
            let folder = file.parent().unwrap().to_owned();
            let siblings = targets
                .into_iter()
                .filter(|t| t.parent() == Some(folder.as_path()) && !t.ends_with("mod.rs"))
                .collect();
            (file, siblings)
        })
        .collect();
    if let Some(found) = cycle(&files) {
        let names: Vec<String> = found
            .iter()
            .map(|f| f.strip_prefix(&src).unwrap().display().to_string())
            .collect();
        panic!("an import cycle among files: {}", names.join(" -> "));
    }
}

#[test]
fn the_reader_finds_cycles_and_use_trees() {
    let graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::from([
        ("a", BTreeSet::from(["b"])),
        ("b", BTreeSet::from(["c"])),
        ("c", BTreeSet::from(["a"])),
    ]);
    assert_eq!(cycle(&graph), Some(vec!["a", "b", "c", "a"]));
    let paths = paths("{\n    domain::{EntityId, Snapshot},\n    store::Store,\n};");
    let first: Vec<&str> = paths.iter().map(|p| p[0].as_str()).collect();
    assert_eq!(first, ["domain", "domain", "store"]);
    assert_eq!(paths[2], ["store", "Store"]);
}

/// What a handler of the API or the console may not write: axum's `Path` (its raw segment,
/// `Path<String>` or a tuple) or its rejection, read by hand instead of through `ApiPath` or
/// `PagePath` (which parse the segment into its `request::path` value and ask the caller's
/// scope), nor the hand parsers those extractors replaced.
fn hand_read_paths(file: &str, code: &str) -> Vec<String> {
    const HAND_PARSERS: [&str; 8] = [
        "path_param(",
        "parse_entity(",
        "whole_id(",
        "item_id(",
        "appeal_id(",
        "action_id(",
        "PathRejection",
        "RawPathParams",
    ];
    let mut found: Vec<String> = HAND_PARSERS
        .iter()
        .filter(|parser| code.contains(*parser))
        .map(|parser| format!("{file} reads a path by hand: {parser}"))
        .collect();
    // axum's `Path` as a type or a pattern: the word itself (not `ApiPath`, `MatchedPath`),
    // followed by `<` or `(`.
    let bytes = code.as_bytes();
    for (at, _) in code.match_indices("Path") {
        let word_start =
            at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        let next = code[at + 4..].trim_start().chars().next();
        if word_start && matches!(next, Some('<' | '(')) {
            let line = code[..at].lines().count();
            found.push(format!(
                "{file}:{line} takes axum's Path: use ApiPath or PagePath"
            ));
        }
    }
    found
}

#[test]
fn handlers_read_their_path_through_the_scoped_extractors() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for edge in ["http", "console"] {
        let mut files = Vec::new();
        files_under(&src.join(edge), &mut files);
        for file in files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        {
            let name = file
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            found.extend(hand_read_paths(&name, &code(file)));
        }
    }
    assert_eq!(found, Vec::<String>::new());
    // The one place that reads a segment also asks the scope, for every value that addresses
    // something.
    let path = code(&src.join("request/path.rs"));
    let reads = path.matches("Path::<String>::from_request_parts").count();
    assert_eq!(
        reads, 1,
        "request/path.rs reads the segment once, in `addressed`"
    );
    let addressed = &path[path.find("pub async fn addressed").unwrap()..];
    let addressed = &addressed[..addressed.find("\n}\n").unwrap()];
    assert!(
        addressed.contains("Path::<String>::from_request_parts") && addressed.contains("admit("),
        "`addressed` reads the segment and asks the scope"
    );
}

/// The handlers of `router` (the code of an edge's `mod.rs`) whose route template takes a path
/// value (`{entity}`, `{id}`) but whose signature reads no `ApiPath` nor `PagePath`, and so
/// would answer without asking the caller's scope; `handler` gives a handler's signature
/// (`module`, `name`).
fn unscoped_routes(router: &str, handler: impl Fn(&str, &str) -> Option<String>) -> Vec<String> {
    let mut unscoped = Vec::new();
    let routes: Vec<&str> = router.split(".route(").skip(1).collect();
    for route in routes {
        let Some(template) = route.split('"').nth(1) else {
            continue;
        };
        if !template.contains('{') {
            continue;
        }
        let rest = &route[route.find(template).unwrap() + template.len()..];
        let rest = rest.split(".route_layer(").next().unwrap();
        let rest = rest.split(".fallback(").next().unwrap();
        let scoped = |code: &str| code.contains("ApiPath<") || code.contains("PagePath<");
        // A closure that takes its path value itself.
        if scoped(rest) {
            continue;
        }
        let handlers: Vec<(&str, &str)> = rest
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .filter_map(|word| word.split_once("::"))
            .filter(|(module, name)| !module.is_empty() && !name.is_empty() && !name.contains(':'))
            .collect();
        if handlers.is_empty() {
            unscoped.push(format!("{template}: no scoped path value"));
        }
        for (module, name) in handlers {
            match handler(module, name) {
                Some(signature) if scoped(&signature) => {}
                Some(_) => unscoped.push(format!(
                    "{template}: {module}::{name} reads no ApiPath or PagePath"
                )),
                None => unscoped.push(format!("{template}: {module}::{name} not found")),
            }
        }
    }
    unscoped
}

#[test]
fn every_route_with_a_path_value_asks_the_scope() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for edge in ["http", "console"] {
        let router = code(&src.join(edge).join("mod.rs"));
        let signature = |module: &str, name: &str| {
            let file = src.join(edge).join(format!("{module}.rs"));
            let code = std::fs::read_to_string(file).ok()?;
            let start = code.find(&format!("pub async fn {name}("))?;
            let end = start + code[start..].find(") ->")?;
            Some(code[start..end].to_owned())
        };
        assert_eq!(
            unscoped_routes(&router, signature),
            Vec::<String>::new(),
            "{edge}"
        );
        // Not true for want of routes: without their signatures, each would be reported.
        let routes = unscoped_routes(&router, |_, _| None).len();
        assert!(
            routes >= 10,
            "{edge}: only {routes} routes with a path value found"
        );
    }
}

#[test]
fn the_scope_check_catches_a_route_that_reads_its_path_otherwise() {
    let router = r#"Router::new()
        .route("/v1/entities/{entity}", get(read::get_entity))
        .route("/v1/actions", get(moderation::list_actions))
        .route(
            "/v1/review/{id}/claim",
            post(review::claim),
        )
        .route("/assets/{file}", get(|PagePath(AssetName(f)): PagePath<AssetName>| async {}))
        .route_layer(x)"#;
    let signature = |module: &str, name: &str| match (module, name) {
        ("read", "get_entity") => {
            Some("pub async fn get_entity(ApiPath(e): ApiPath<EntityId>".to_owned())
        }
        ("review", "claim") => {
            Some("pub async fn claim(path: Result<Path<String>, PathRejection>".to_owned())
        }
        _ => None,
    };
    assert_eq!(
        unscoped_routes(router, signature),
        ["/v1/review/{id}/claim: review::claim reads no ApiPath or PagePath"]
    );
}

#[test]
fn the_path_check_catches_a_hand_read_path() {
    let handler = "pub async fn get(\n    path: Result<Path<String>, PathRejection>,\n) {\n    let raw = path_param(path, \"id\")?;\n}";
    assert_eq!(
        hand_read_paths("http/x.rs", handler),
        [
            "http/x.rs reads a path by hand: path_param(",
            "http/x.rs reads a path by hand: PathRejection",
            "http/x.rs:2 takes axum's Path: use ApiPath or PagePath",
        ]
    );
    let tuple = "async fn f(Path((a, b)): Path<(String, i64)>) {}";
    assert_eq!(hand_read_paths("console/x.rs", tuple).len(), 2);
    let fine = "async fn f(ApiPath(id): ApiPath<ActionId>, m: MatchedPath) {}\nparams((\"id\" = i64, Path, description = \"x\"))";
    assert_eq!(hand_read_paths("http/x.rs", fine), Vec::<String>::new());
}

/// One row of the map's modules table: its layer, its module (`store` for `store/`, `audit`
/// for `audit.rs`) and the whole row's text.
struct Row {
    layer: String,
    module: String,
    text: String,
}

/// The rows of the table under `## The modules`, in order; other tables of the doc are not the map.
fn map_rows(doc: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut in_section = false;
    for line in doc.lines() {
        if line.starts_with("## ") {
            in_section = line.trim() == "## The modules";
            continue;
        }
        let Some(cells) = line.trim().strip_prefix('|').filter(|_| in_section) else {
            continue;
        };
        let cells: Vec<&str> = cells.split('|').map(str::trim).collect();
        // The header and its rule have no module in backticks.
        let Some(name) = cells
            .get(1)
            .and_then(|c| c.strip_prefix('`')?.strip_suffix('`'))
        else {
            continue;
        };
        rows.push(Row {
            layer: cells[0].to_owned(),
            module: name
                .trim_end_matches('/')
                .trim_end_matches(".rs")
                .to_owned(),
            text: line.to_owned(),
        });
    }
    rows
}

/// What a text puts in backticks.
fn quoted(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// What the map gets wrong about `files` (paths below `src/`, with `/`): a file its module's row
/// does not name (as `fold`, `fold.rs` or `store/fold.rs`; a `mod.rs` or a one-file module is
/// named by its row), and a `.rs` name of a row that is no file.
fn map_errors(doc: &str, files: &[&str]) -> Vec<String> {
    let rows = map_rows(doc);
    let mut errors = Vec::new();
    for file in files {
        let (module, inner) = file
            .split_once('/')
            .unwrap_or((file.trim_end_matches(".rs"), ""));
        let named = rows.iter().filter(|row| row.module == module).any(|row| {
            inner.is_empty()
                || inner == "mod.rs"
                || quoted(&row.text)
                    .any(|n| n == inner || n == inner.trim_end_matches(".rs") || n == *file)
        });
        if !named {
            errors.push(format!("{file} is not named in its module's row"));
        }
    }
    for row in &rows {
        for name in quoted(&row.text).filter(|n| n.ends_with(".rs")) {
            let within = format!("{}/{name}", row.module);
            if !files.contains(&name) && !files.contains(&within.as_str()) {
                errors.push(format!(
                    "the map names `{name}` ({}), which is not a file under src/",
                    row.module
                ));
            }
        }
    }
    errors
}

/// Where `imports` (module -> the modules it uses) break the map's order: a module without a
/// row, or an import of a module the map lists above the importer.
fn order_breaks(doc: &str, imports: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let order: Vec<String> = map_rows(doc).into_iter().map(|row| row.module).collect();
    let at = |module: &str| order.iter().position(|m| m == module);
    let mut breaks = Vec::new();
    for (from, targets) in imports {
        let Some(from_at) = at(from) else {
            breaks.push(format!("{from} has no row in the map"));
            continue;
        };
        for to in targets {
            match at(to) {
                None => breaks.push(format!("{to} has no row in the map")),
                Some(to_at) if to_at < from_at => {
                    breaks.push(format!("{from} imports {to}, which the map lists above it"))
                }
                Some(_) => {}
            }
        }
    }
    breaks
}

#[test]
fn the_map_names_every_file_and_imports_point_down_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut files = Vec::new();
    files_under(&src, &mut files);
    files.sort();
    let files: Vec<String> = files
        .iter()
        .map(|f| {
            f.strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .collect();
    let files: Vec<&str> = files.iter().map(String::as_str).collect();
    assert_eq!(
        map_errors(&doc, &files),
        Vec::<String>::new(),
        "docs/architecture.md"
    );
    let breaks = order_breaks(&doc, &module_graph(&src));
    assert_eq!(breaks, Vec::<String>::new(), "docs/architecture.md's order");
    // The map's layers are the ones the rules above hold.
    for row in map_rows(&doc) {
        let (module, layer) = (row.module.as_str(), row.layer.as_str());
        let lower = LOWER.contains(&module);
        assert_eq!(
            lower,
            ["lower", "leaf"].contains(&layer),
            "{module} is {layer}"
        );
        assert_eq!(
            USE_CASES.contains(&module),
            layer == "use case",
            "{module} is {layer}"
        );
        assert_eq!(
            EDGES.contains(&module),
            layer == "edge",
            "{module} is {layer}"
        );
    }
}

#[test]
fn the_map_checks_catch_a_wrong_map() {
    let doc = "# Map\n\n## The modules\n\n| Layer | Module | What | Files |\n|---|---|---|---|\n\
        | edge | `http/` | Handlers | `mod.rs`, `events` |\n\
        | lower | `store/` | SQL | `fold.rs`, `gone.rs` |\n\
        | leaf | `domain.rs` | Values | this file |\n\n\
        ## Elsewhere\n\n| x | `queue/` | not a row of the map |\n";
    let files = [
        "http/mod.rs",
        "http/events.rs",
        "http/read.rs",
        "store/mod.rs",
        "store/fold.rs",
        "domain.rs",
        "queue/mod.rs",
    ];
    assert_eq!(
        map_errors(doc, &files),
        [
            "http/read.rs is not named in its module's row",
            "queue/mod.rs is not named in its module's row",
            "the map names `gone.rs` (store), which is not a file under src/",
        ]
    );
    let set = |modules: &[&str]| modules.iter().map(|m| m.to_string()).collect();
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::from([
        ("http".to_owned(), set(&["store", "domain"])),
        ("store".to_owned(), set(&["domain", "http"])),
        ("domain".to_owned(), set(&[])),
        ("queue".to_owned(), set(&["domain"])),
    ]);
    assert_eq!(
        order_breaks(doc, &imports),
        [
            "queue has no row in the map",
            "store imports http, which the map lists above it",
        ]
    );
    // Put right, the same map and imports have nothing to say.
    let fixed = doc
        .replace("`events` |", "`events`, `read` |")
        .replace(", `gone.rs`", "")
        .replace(
            "| leaf |",
            "| lower | `queue/` | Redis | `mod.rs` |\n| leaf |",
        );
    imports.get_mut("store").unwrap().remove("http");
    assert_eq!(map_errors(&fixed, &files), Vec::<String>::new());
    assert_eq!(order_breaks(&fixed, &imports), Vec::<String>::new());
}

/// The files that may start a task outside a `JoinSet` (`tokio::spawn` and the like), each
/// with why its handles are not lost. Everywhere else a task lives in a `JoinSet` its owner
/// reaps, or runs inside its caller's task: no task is detached, and none ends unseen.
const SPAWNERS: [(&str, &str); 2] = [
    (
        "startup/supervisor.rs",
        "the supervisor: every long-lived task of serve and worker, named, its end awaited",
    ),
    (
        "backtest/mod.rs",
        "spawn_blocking: the replay's work off the runtime, each handle awaited where it is made",
    ),
];

/// How a task is started outside a `JoinSet`.
const SPAWNS: [&str; 4] = [
    "tokio::spawn",
    "task::spawn(",
    "spawn_local(",
    "spawn_blocking(",
];

/// What in `code` (of the file `file`, relative to `src/`) detaches a task: a spawn outside
/// [`SPAWNERS`], or a join's outcome thrown away (`let _ = task.await`, `let _ =
/// tasks.join_next()...`).
fn detached(file: &str, code: &str) -> Vec<String> {
    let mut found = Vec::new();
    if !SPAWNERS.iter().any(|(allowed, _)| *allowed == file) {
        for spawn in SPAWNS {
            if code.contains(spawn) {
                found.push(format!(
                    "{file} starts a task with `{spawn}` outside a JoinSet"
                ));
            }
        }
    }
    for statement in code.split(';') {
        let Some(at) = statement.find("let _ =") else {
            continue;
        };
        let expression = statement[at..].to_lowercase();
        let joined = ["join_next", "joinhandle", "join!("]
            .iter()
            .any(|join| expression.contains(join))
            || (expression.contains(".await")
                && ["task", "handle", "spawn", "server"]
                    .iter()
                    .any(|name| expression.contains(name)));
        if joined {
            found.push(format!(
                "{file} drops a task's outcome: `{}`",
                statement[at..]
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
    }
    found
}

#[test]
fn no_task_is_detached_and_no_join_is_dropped() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    files_under(&src, &mut files);
    let mut found = Vec::new();
    for path in files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
    {
        let file = path
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        found.extend(detached(&file, &code(path)));
    }
    assert_eq!(found, Vec::<String>::new());
}

#[test]
fn the_detached_check_catches_a_spawn_and_a_dropped_join() {
    assert_eq!(
        detached(
            "worker/mod.rs",
            "fn run() { tokio::spawn(forward()); tasks.spawn(evaluate()); }"
        ),
        ["worker/mod.rs starts a task with `tokio::spawn` outside a JoinSet"]
    );
    assert_eq!(
        detached(
            "startup/supervisor.rs",
            "fn spawn() { tokio::spawn(task); }"
        ),
        Vec::<String>::new()
    );
    assert_eq!(
        detached(
            "startup/mod.rs",
            "async fn f() { let _ = dispatcher_task.await; let _ = metrics_handle(); }"
        ),
        ["startup/mod.rs drops a task's outcome: `let _ = dispatcher_task.await`"]
    );
    assert_eq!(
        detached(
            "http/server.rs",
            "fn f() { let _ = connections.join_next(); }"
        ),
        ["http/server.rs drops a task's outcome: `let _ = connections.join_next()`"]
    );
}

/// Where a topic's name appears as a string or SQL literal (`"action.applied"`,
/// `'action.applied'`) in `text`, one line each.
fn topic_literals(text: &str, topics: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        for topic in topics {
            if line.contains(&format!("\"{topic}\"")) || line.contains(&format!("'{topic}'")) {
                found.push(format!("line {}: {topic}", number + 1));
            }
        }
    }
    found
}

/// The places `text` nests a result in a result (a function's, or a closure's handed to the
/// store): a refusal is the use case's typed error, not a value the store returns inside its
/// own.
fn nested_results(text: &str) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let line = line.replace(' ', "");
            line.contains("Result<Result<") || line.contains("Result<std::result::Result<")
        })
        .map(|(number, line)| format!("line {}: {}", number + 1, line.trim()))
        .collect()
}

#[test]
fn topics_are_named_in_their_enum_only_and_no_result_nests_another() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let webhook = src.join("domain/webhook.rs");
    let topics: Vec<&str> = quiesce::domain::Topic::ALL
        .iter()
        .map(|topic| topic.name())
        .collect();
    let enum_file = std::fs::read_to_string(&webhook).unwrap();
    for topic in &topics {
        assert!(
            enum_file.contains(&format!("\"{topic}\"")),
            "{topic} is not named in {webhook:?}"
        );
    }
    let mut files = Vec::new();
    files_under(&src, &mut files);
    let mut errors = Vec::new();
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
    {
        let text = std::fs::read_to_string(file).unwrap();
        let name = file.strip_prefix(&src).unwrap().display();
        if *file != webhook {
            for place in topic_literals(&text, &topics) {
                errors.push(format!(
                    "src/{name}, {place}: a topic named outside its enum"
                ));
            }
        }
        for place in nested_results(&text) {
            errors.push(format!("src/{name}, {place}: a result nested in a result"));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn the_topic_and_result_checks_catch_what_they_are_for() {
    let topics = ["action.applied", "label.removed"];
    let code = r#"
        "INSERT INTO outbox (topic) VALUES ('action.applied')",
        let key = format!("label.removed:{id}");
        let topic = "label.removed";
        // `action.applied` in a comment is a name, not a literal
    "#;
    assert_eq!(
        topic_literals(code, &topics),
        ["line 2: action.applied", "line 4: label.removed"]
    );
    let code = "fn a() -> Result<Result<(), R>> {}\nfn b() -> Result<std::result::Result<T, R>>\nfn c() -> Result<Option<T>>";
    assert_eq!(nested_results(code).len(), 2);
}

/// What `Store` itself may offer: the connection's own (the pool, its fence, the replica, a
/// transaction) and one handle per file of statements. A statement is a method of its file's
/// handle (`store.appeals().list(..)`), never of the store, so the store does not grow back
/// into a facade of every statement.
const STORE_OWN: [&str; 10] = [
    "new",
    "submitting_statements",
    "with_partitions",
    "with_replica",
    "pool",
    "replica",
    "writable",
    "primary_refused_since",
    "notice",
    "begin",
];

#[test]
fn the_store_offers_handles_not_statements() {
    let store = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    let mut files = Vec::new();
    files_under(&store, &mut files);
    let mut errors = Vec::new();
    let mut handles = BTreeSet::new();
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
    {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let text = code(file);
        if name != "mod.rs" && text.contains("impl Store {") {
            errors.push(format!(
                "src/store/{name}: an `impl Store` block (its statements belong to its handle)"
            ));
        }
        if text.contains("<'a> {\n    pub(super) store: &'a Store,") {
            handles.insert(name.trim_end_matches(".rs").to_owned());
        }
    }
    let module = code(&store.join("mod.rs"));
    let mut offered = Vec::new();
    let mut in_store = false;
    for line in module.lines() {
        if line == "impl Store {" {
            in_store = true;
        } else if line == "}" {
            in_store = false;
        } else if in_store
            && let Some(rest) = line
                .strip_prefix("    pub fn ")
                .or_else(|| line.strip_prefix("    pub async fn "))
        {
            offered.push(rest.split(['(', '<']).next().unwrap().to_owned());
        }
    }
    for method in &offered {
        if !STORE_OWN.contains(&method.as_str()) && !handles.contains(method) {
            errors.push(format!(
                "Store::{method} is neither the connection's nor a handle: a statement goes in its file's handle"
            ));
        }
    }
    assert!(handles.len() >= 20, "handles found: {handles:?}");
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// The lines of `text` that mention the OpenAPI derive or its crate: the API's types, its wire
/// contract, are `http`'s (`http/wire/`), and a store row is not one.
fn schema_mentions(text: &str) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| line.contains("ToSchema") || line.contains("utoipa"))
        .map(|(number, line)| format!("line {}: {}", number + 1, line.trim()))
        .collect()
}

#[test]
fn no_store_row_is_the_apis_wire_contract() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    files_under(&src.join("store"), &mut files);
    let mut errors = Vec::new();
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
    {
        let name = file.strip_prefix(&src).unwrap().display();
        for place in schema_mentions(&std::fs::read_to_string(file).unwrap()) {
            errors.push(format!(
                "src/{name}, {place}: the store names the API's schema (its types go in http/wire/)"
            ));
        }
    }
    let document = code(&src.join("http/openapi.rs"));
    if document.contains("store::") {
        errors.push("src/http/openapi.rs names a store type: the document names http's".to_owned());
    }
    assert!(files.len() > 20, "store files found: {}", files.len());
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn the_schema_check_catches_a_derive_and_an_import() {
    let row = "#[derive(Debug, Serialize, utoipa::ToSchema)]\npub struct Row {\n    #[schema(value_type = Object)]\n    pub a: serde_json::Value,\n}\nuse utoipa::ToSchema;";
    assert_eq!(
        schema_mentions(row),
        [
            "line 1: #[derive(Debug, Serialize, utoipa::ToSchema)]",
            "line 6: use utoipa::ToSchema;"
        ]
    );
}
