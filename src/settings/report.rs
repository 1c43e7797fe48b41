//! `quiesce config`: every setting's value and where it came from, secrets redacted, laid out
//! as a config file would be.

use std::fmt::Write;

use super::{Loaded, Origin};

impl Loaded {
    /// The effective settings as TOML, section by section, each value with its origin in a
    /// comment. The comments of a section line up two characters past its longest line, so a
    /// long value (a database URL) widens its own section only.
    pub fn report(&self) -> String {
        let mut out = String::from(
            "# The effective settings, each with the layer it came from: default, the config\n\
             # file (--config), the environment (QUIESCE_*) or a flag. Secrets are redacted.\n",
        );
        let lines: Vec<(String, String, String)> = self
            .origins()
            .into_iter()
            .map(|(shown, origin)| {
                let line = format!("{} = {}", shown.field.name, toml_value(&shown.shown));
                let from = match &origin {
                    Origin::Default => "default".to_owned(),
                    Origin::File(path) => format!("file {}", path.display()),
                    Origin::Environment => format!("environment {}", shown.field.variable()),
                    Origin::Flag => format!("flag --{}", shown.field.flag()),
                };
                (shown.field.section.to_owned(), line, from)
            })
            .collect();
        let mut section = "";
        let mut width = 0;
        for (name, line, from) in &lines {
            if name != section {
                let _ = write!(out, "\n[{name}]\n");
                section = name;
                // Characters, as the padding counts them (a path may hold more than ASCII).
                width = lines
                    .iter()
                    .filter(|(other, ..)| other == name)
                    .map(|(_, line, _)| line.chars().count())
                    .max()
                    .unwrap_or(0);
            }
            let _ = writeln!(out, "{line:width$}  # {from}");
        }
        out
    }
}

/// Numbers and booleans bare, everything else quoted.
fn toml_value(text: &str) -> String {
    let bare = text.parse::<f64>().is_ok_and(f64::is_finite) || text == "true" || text == "false";
    if bare {
        text.to_owned()
    } else {
        format!("{text:?}")
    }
}
