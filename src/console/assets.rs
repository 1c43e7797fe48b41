//! The console's own assets, embedded in the binary: one stylesheet and an icon (there is no
//! script). Each is served under a name holding a digest of its bytes, so it can be cached for
//! good and a new build's file is a new address.

use std::sync::LazyLock;

use axum::{
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use sha2::{Digest, Sha256};

/// An embedded file.
pub struct Asset {
    content_type: &'static str,
    bytes: &'static [u8],
    file: LazyLock<String>,
}

impl Asset {
    /// `<stem>-<12 hex digits of its sha256>.<extension>`.
    pub fn file_name(&self) -> &str {
        &self.file
    }

    /// Where pages link it.
    pub fn href(&self) -> String {
        format!("/console/assets/{}", self.file_name())
    }
}

macro_rules! asset {
    ($stem:literal, $extension:literal, $content_type:literal, $path:literal) => {
        Asset {
            content_type: $content_type,
            bytes: include_bytes!($path),
            file: LazyLock::new(|| {
                let digest = Sha256::digest(include_bytes!($path));
                let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
                format!("{}-{hex}.{}", $stem, $extension)
            }),
        }
    };
}

pub static STYLESHEET: Asset = asset!(
    "console",
    "css",
    "text/css; charset=utf-8",
    "assets/console.css"
);
pub static ICON: Asset = asset!("icon", "svg", "image/svg+xml", "assets/icon.svg");

static ALL: [&Asset; 2] = [&STYLESHEET, &ICON];

/// The asset of this digest name, cacheable for a year; `None` for any other name.
pub fn serve(file: &str) -> Option<Response> {
    let asset = ALL.iter().find(|asset| asset.file_name() == file)?;
    let mut response = asset.bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_are_named_by_their_digest() {
        let css = STYLESHEET.file_name();
        assert!(
            css.starts_with("console-") && css.ends_with(".css"),
            "{css}"
        );
        assert_eq!(css.len(), "console-".len() + 12 + ".css".len());
        assert!(ICON.file_name().starts_with("icon-"));
        assert!(ALL.iter().all(|asset| !asset.bytes.is_empty()));
    }
}
