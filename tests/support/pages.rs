//! The pages of the documentation: README.md and every page under docs/, which the smoke test
//! runs the commands of (tests/readme.rs) and whose links tests/docs_links.rs follows.

use std::path::{Path, PathBuf};

/// README.md and every `.md` under docs/, as paths below `root` (the checkout), sorted.
pub fn pages(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, pages: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, pages);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    let mut pages = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut pages);
    pages.sort();
    pages
}
