//! Every relative link of README.md and of the pages under docs/ leads somewhere: a link
//! (`[text](path)`, `<img src="path">`) to a file that exists, and a `#anchor` to a heading of
//! the page it names (GitHub's anchors: the heading in lower case, spaces as hyphens, other
//! punctuation dropped, `-1`, `-2`, ... after a repeated one). Links in code are not links.

use std::{collections::BTreeSet, path::Path};

#[path = "support/pages.rs"]
mod support;
use support::pages;

/// The lines of a page outside fenced code, with inline code taken out, and their numbers.
fn prose(text: &str) -> Vec<(usize, String)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            let kept: String = line
                .split('`')
                .enumerate()
                .filter(|(i, _)| i % 2 == 0)
                .map(|(_, part)| part)
                .collect();
            lines.push((number + 1, kept));
        }
    }
    lines
}

/// GitHub's anchor of a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if fenced || hashes == 0 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let mut anchor = base.clone();
        let mut n = 0;
        while anchors.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        anchors.insert(anchor);
    }
    anchors
}

/// The link targets of a line: `](target)` and `src="target"`.
fn targets(line: &str) -> Vec<String> {
    let link = regex::Regex::new(r#"\]\(([^)\s]+)\)|src="([^"]+)""#).unwrap();
    link.captures_iter(line)
        .map(|c| c.get(1).or(c.get(2)).unwrap().as_str().to_owned())
        .collect()
}

/// The broken links of one page: `page:line: target (why)`.
fn broken(root: &Path, page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).unwrap();
    let name = page.strip_prefix(root).unwrap().display().to_string();
    let mut broken = Vec::new();
    for (number, line) in prose(&text) {
        for target in targets(&line) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                page.to_path_buf()
            } else {
                page.parent().unwrap().join(path)
            };
            if !file.exists() {
                broken.push(format!("{name}:{number}: {target} (no such file)"));
                continue;
            }
            if let Some(anchor) = anchor
                && file.extension().is_some_and(|e| e == "md")
                && !anchors(&std::fs::read_to_string(&file).unwrap()).contains(anchor)
            {
                broken.push(format!("{name}:{number}: {target} (no such heading)"));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_of_the_readme_and_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pages = pages(root);
    assert!(pages.len() > 10, "{pages:?}");
    let broken: Vec<String> = pages.iter().flat_map(|page| broken(root, page)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_are_githubs_and_code_holds_no_links() {
    let page = "# Title\n## GET /v1/entities/{entity}/evaluations\n## The guard: rules, turned\n\
                ## Notes\n## Notes\n```sh\n# not a heading\n```\n";
    let found = anchors(page);
    for anchor in [
        "title",
        "get-v1entitiesentityevaluations",
        "the-guard-rules-turned",
        "notes",
        "notes-1",
    ] {
        assert!(found.contains(anchor), "{anchor}: {found:?}");
    }
    assert!(!found.contains("not-a-heading"), "{found:?}");
    let lines = prose("see [a](b.md) and `[c](d.md)`\n```\n[e](f.md)\n```\n<img src=\"g.png\">\n");
    let all: Vec<String> = lines.iter().flat_map(|(_, l)| targets(l)).collect();
    assert_eq!(all, ["b.md", "g.png"]);
}
