//! The DSA Transparency Database's statement schema in force (API v1, mandatory since
//! 2025-07-01, Implementing Regulation (EU) 2024/2835): the enumerations a statement's fields
//! take, as the Commission's own application lists them (digital-services-act/
//! transparency-database, main at 69e80a0b of 2026-06-24: `app/Models/Statement.php`,
//! `app/Services/EuropeanCountriesService.php`, `app/Services/EuropeanLanguagesService.php`),
//! the bounds of its fields, and what the 2023 schema's categories became.

use chrono::NaiveDate;

/// The longest explanation the database takes.
pub const MAX_EXPLANATION: usize = 2000;
/// The longest ground, URL, `*_other` text the database takes.
pub const MAX_SHORT_TEXT: usize = 500;
/// The longest facts text the database takes.
pub const MAX_FACTS: usize = 5000;

/// The statement categories (`category`, `category_addition`): `STATEMENT_CATEGORIES`.
pub const CATEGORIES: &[&str] = &[
    "STATEMENT_CATEGORY_ANIMAL_WELFARE",
    "STATEMENT_CATEGORY_CONSUMER_INFORMATION",
    "STATEMENT_CATEGORY_CYBER_VIOLENCE",
    "STATEMENT_CATEGORY_CYBER_VIOLENCE_AGAINST_WOMEN",
    "STATEMENT_CATEGORY_DATA_PROTECTION_AND_PRIVACY_VIOLATIONS",
    "STATEMENT_CATEGORY_ILLEGAL_OR_HARMFUL_SPEECH",
    "STATEMENT_CATEGORY_INTELLECTUAL_PROPERTY_INFRINGEMENTS",
    "STATEMENT_CATEGORY_NEGATIVE_EFFECTS_ON_CIVIC_DISCOURSE_OR_ELECTIONS",
    "STATEMENT_CATEGORY_NOT_SPECIFIED_NOTICE",
    "STATEMENT_CATEGORY_OTHER_VIOLATION_TC",
    "STATEMENT_CATEGORY_PROTECTION_OF_MINORS",
    "STATEMENT_CATEGORY_RISK_FOR_PUBLIC_SECURITY",
    "STATEMENT_CATEGORY_SCAMS_AND_FRAUD",
    "STATEMENT_CATEGORY_SELF_HARM",
    "STATEMENT_CATEGORY_UNSAFE_AND_PROHIBITED_PRODUCTS",
    "STATEMENT_CATEGORY_VIOLENCE",
];

/// The content types (`content_type`).
pub const CONTENT_TYPES: &[&str] = &[
    "CONTENT_TYPE_APP",
    "CONTENT_TYPE_AUDIO",
    "CONTENT_TYPE_IMAGE",
    "CONTENT_TYPE_PRODUCT",
    "CONTENT_TYPE_SYNTHETIC_MEDIA",
    "CONTENT_TYPE_TEXT",
    "CONTENT_TYPE_VIDEO",
    "CONTENT_TYPE_OTHER",
];

/// The category specifications (`category_specification`): `KEYWORDS`.
pub const KEYWORDS: &[&str] = &[
    "KEYWORD_ADULT_SEXUAL_MATERIAL",
    "KEYWORD_AGE_SPECIFIC_RESTRICTIONS",
    "KEYWORD_AGE_SPECIFIC_RESTRICTIONS_MINORS",
    "KEYWORD_ANIMAL_HARM",
    "KEYWORD_BIOMETRIC_DATA_BREACH",
    "KEYWORD_BULLYING_AGAINST_GIRLS",
    "KEYWORD_CHILD_SEXUAL_ABUSE_MATERIAL",
    "KEYWORD_CHILD_SEXUAL_ABUSE_MATERIAL_DEEPFAKE",
    "KEYWORD_CONTENT_PROMOTING_EATING_DISORDERS",
    "KEYWORD_COORDINATED_HARM",
    "KEYWORD_COPYRIGHT_INFRINGEMENT",
    "KEYWORD_CYBER_BULLYING_INTIMIDATION",
    "KEYWORD_CYBER_HARASSMENT",
    "KEYWORD_CYBER_HARASSMENT_AGAINST_WOMEN",
    "KEYWORD_CYBER_INCITEMENT",
    "KEYWORD_CYBER_STALKING",
    "KEYWORD_CYBER_STALKING_AGAINST_WOMEN",
    "KEYWORD_DATA_FALSIFICATION",
    "KEYWORD_DEFAMATION",
    "KEYWORD_DESIGN_INFRINGEMENT",
    "KEYWORD_DISCRIMINATION",
    "KEYWORD_FEMALE_GENDERED_DISINFORMATION",
    "KEYWORD_GEOGRAPHIC_INDICATIONS_INFRINGEMENT",
    "KEYWORD_GEOGRAPHICAL_REQUIREMENTS",
    "KEYWORD_GOODS_SERVICES_NOT_PERMITTED",
    "KEYWORD_GROOMING_SEXUAL_ENTICEMENT_MINORS",
    "KEYWORD_HATE_SPEECH",
    "KEYWORD_HIDDEN_ADVERTISEMENT",
    "KEYWORD_HUMAN_EXPLOITATION",
    "KEYWORD_HUMAN_TRAFFICKING",
    "KEYWORD_ILLEGAL_ORGANIZATIONS",
    "KEYWORD_IMPERSONATION_ACCOUNT_HIJACKING",
    "KEYWORD_INAUTHENTIC_ACCOUNTS",
    "KEYWORD_INAUTHENTIC_LISTINGS",
    "KEYWORD_INAUTHENTIC_USER_REVIEWS",
    "KEYWORD_INCITEMENT_AGAINST_WOMEN",
    "KEYWORD_INCITEMENT_VIOLENCE_HATRED",
    "KEYWORD_INSUFFICIENT_INFORMATION_ON_TRADERS",
    "KEYWORD_LANGUAGE_REQUIREMENTS",
    "KEYWORD_MISINFORMATION_DISINFORMATION",
    "KEYWORD_MISLEADING_INFO_CONSUMER_RIGHTS",
    "KEYWORD_MISLEADING_INFO_GOODS_SERVICES",
    "KEYWORD_MISSING_PROCESSING_GROUND",
    "KEYWORD_NON_CONSENSUAL_IMAGE_SHARING",
    "KEYWORD_NON_CONSENSUAL_IMAGE_SHARING_AGAINST_WOMEN",
    "KEYWORD_NON_CONSENSUAL_MATERIAL_DEEPFAKE",
    "KEYWORD_NON_CONSENSUAL_MATERIAL_DEEPFAKE_AGAINST_WOMEN",
    "KEYWORD_NONCOMPLIANCE_PRICING",
    "KEYWORD_NUDITY",
    "KEYWORD_PATENT_INFRINGEMENT",
    "KEYWORD_PHISHING",
    "KEYWORD_PROHIBITED_PRODUCTS",
    "KEYWORD_PYRAMID_SCHEMES",
    "KEYWORD_RIGHT_TO_BE_FORGOTTEN",
    "KEYWORD_RISK_ENVIRONMENTAL_DAMAGE",
    "KEYWORD_RISK_PUBLIC_HEALTH",
    "KEYWORD_SELF_MUTILATION",
    "KEYWORD_STALKING",
    "KEYWORD_SUICIDE",
    "KEYWORD_TERRORIST_CONTENT",
    "KEYWORD_TRADE_SECRET_INFRINGEMENT",
    "KEYWORD_TRADEMARK_INFRINGEMENT",
    "KEYWORD_TRAFFICKING_WOMEN_GIRLS",
    "KEYWORD_UNLAWFUL_SALE_ANIMALS",
    "KEYWORD_UNSAFE_CHALLENGES",
    "KEYWORD_UNSAFE_PRODUCTS",
    "KEYWORD_VIOLATION_EU_LAW",
    "KEYWORD_VIOLATION_NATIONAL_LAW",
    "KEYWORD_OTHER",
];

/// The account types (`account_type`).
pub const ACCOUNT_TYPES: &[&str] = &["ACCOUNT_TYPE_BUSINESS", "ACCOUNT_TYPE_PRIVATE"];

/// The territorial scope's countries, the EU's and the EEA's (`EUROPEAN_COUNTRY_CODES`).
pub const COUNTRY_CODES: &[&str] = &[
    "AT", "BE", "BG", "CY", "CZ", "DE", "DK", "EE", "ES", "FI", "FR", "GR", "HR", "HU", "IE", "IS",
    "IT", "LI", "LT", "LU", "LV", "MT", "NL", "NO", "PL", "PT", "RO", "SE", "SI", "SK",
];

/// The content languages (`content_language`): ISO 639-1, upper case (`ALL_LANGUAGES`).
pub const LANGUAGES: &[&str] = &[
    "AB", "AA", "AF", "AK", "SQ", "AM", "AR", "AN", "HY", "AS", "AV", "AE", "AY", "AZ", "BM", "BA",
    "EU", "BE", "BN", "BH", "BI", "BS", "BR", "BG", "MY", "CA", "KM", "CH", "CE", "NY", "ZH", "CU",
    "CV", "KW", "CO", "CR", "HR", "CS", "DA", "DV", "NL", "DZ", "EN", "EO", "ET", "EE", "FO", "FJ",
    "FI", "FR", "FF", "GD", "GL", "LG", "KA", "DE", "KI", "EL", "KL", "GN", "GU", "HT", "HA", "HE",
    "HZ", "HI", "HO", "HU", "IS", "IO", "IG", "ID", "IA", "IE", "IU", "IK", "GA", "IT", "JA", "JV",
    "KN", "KR", "KS", "KK", "RW", "KV", "KG", "KO", "KJ", "KU", "KY", "LO", "LA", "LV", "LB", "LI",
    "LN", "LT", "LU", "MK", "MG", "MS", "ML", "MT", "GV", "MI", "MR", "MH", "RO", "MN", "NA", "NV",
    "ND", "NG", "NE", "SE", "NO", "NB", "NN", "II", "OC", "OJ", "OR", "OM", "OS", "PI", "PA", "PS",
    "FA", "PL", "PT", "QU", "RM", "RN", "RU", "SM", "SG", "SA", "SC", "SR", "SN", "SD", "SI", "SK",
    "SL", "SO", "ST", "NR", "ES", "SU", "SW", "SS", "SV", "TL", "TY", "TG", "TA", "TT", "TE", "TH",
    "BO", "TI", "TO", "TS", "TN", "TR", "TK", "TW", "UG", "UK", "UR", "UZ", "VE", "VI", "VO", "WA",
    "CY", "FY", "WO", "XH", "YI", "YO", "ZA", "ZU",
];

/// The keyword that needs `category_specification_other`.
pub const KEYWORD_OTHER: &str = "KEYWORD_OTHER";

/// The 2023 schema's categories, each with the category in force quiesce takes for it (the
/// Commission published no mapping; docs/statements.md gives the reasons).
pub const CATEGORIES_2023: &[(&str, &str)] = &[
    (
        "STATEMENT_CATEGORY_PIRACY",
        "STATEMENT_CATEGORY_INTELLECTUAL_PROPERTY_INFRINGEMENTS",
    ),
    (
        "STATEMENT_CATEGORY_DISCRIMINATION",
        "STATEMENT_CATEGORY_ILLEGAL_OR_HARMFUL_SPEECH",
    ),
    (
        "STATEMENT_CATEGORY_COUNTERFEIT",
        "STATEMENT_CATEGORY_INTELLECTUAL_PROPERTY_INFRINGEMENTS",
    ),
    (
        "STATEMENT_CATEGORY_FRAUD",
        "STATEMENT_CATEGORY_SCAMS_AND_FRAUD",
    ),
    (
        "STATEMENT_CATEGORY_TERRORISM",
        "STATEMENT_CATEGORY_RISK_FOR_PUBLIC_SECURITY",
    ),
    (
        "STATEMENT_CATEGORY_CHILD_SAFETY",
        "STATEMENT_CATEGORY_PROTECTION_OF_MINORS",
    ),
    (
        "STATEMENT_CATEGORY_NON_CONSENT",
        "STATEMENT_CATEGORY_CYBER_VIOLENCE",
    ),
    (
        "STATEMENT_CATEGORY_MISINFORMATION",
        "STATEMENT_CATEGORY_NEGATIVE_EFFECTS_ON_CIVIC_DISCOURSE_OR_ELECTIONS",
    ),
    (
        "STATEMENT_CATEGORY_VIOLATION_TOS",
        "STATEMENT_CATEGORY_OTHER_VIOLATION_TC",
    ),
    (
        "STATEMENT_CATEGORY_UNCATEGORISED",
        "STATEMENT_CATEGORY_OTHER_VIOLATION_TC",
    ),
];

/// The category in force a 2023 category became, if `category` is one.
pub fn category_for_2023(category: &str) -> Option<&'static str> {
    CATEGORIES_2023
        .iter()
        .find(|(old, _)| *old == category)
        .map(|(_, new)| *new)
}

/// The earliest `content_date` the database takes (`after_or_equal:2000-01-01`).
pub fn first_content_date() -> NaiveDate {
    NaiveDate::from_ymd_opt(2000, 1, 1).expect("a date")
}

/// The latest date of any field the database takes (`before_or_equal:2038-01-01`).
pub fn last_date() -> NaiveDate {
    NaiveDate::from_ymd_opt(2038, 1, 1).expect("a date")
}

/// A `content_date` as a sender gives it: `YYYY-MM-DD`, a real day, within the database's
/// bounds (2000-01-01 to 2038-01-01).
pub fn parse_content_date(text: &str) -> Result<NaiveDate, String> {
    let date = NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .filter(|d| d.format("%Y-%m-%d").to_string() == text)
        .ok_or_else(|| format!("{text:?} is not a date written YYYY-MM-DD"))?;
    if date < first_content_date() || date > last_date() {
        return Err(format!(
            "{text} is outside the Transparency Database's bounds (2000-01-01 to 2038-01-01)"
        ));
    }
    Ok(date)
}

/// A statement as the OpenAPI document describes it: the database's fields in force, each
/// enumeration listed, and quiesce's own keys.
pub fn statement_openapi() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
    fn text(description: &str) -> ObjectBuilder {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(description))
    }
    fn one_of(description: &str, values: &[&str]) -> ObjectBuilder {
        text(description).enum_values(Some(values.iter().copied()))
    }
    fn list(description: &str, values: &[&str]) -> ArrayBuilder {
        ArrayBuilder::new()
            .items(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(values.iter().copied())),
            )
            .description(Some(description))
    }
    let day = |what: &str| {
        text(&format!("{what}, `YYYY-MM-DD` (UTC)")).format(Some(
            utoipa::openapi::SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::Date),
        ))
    };
    ObjectBuilder::new()
        .description(Some(
            "A statement of reasons in the DSA Transparency Database's schema in force (API v1, since 2025-07-01); docs/statements.md maps each field. The `quiesce_` keys are quiesce's own and never sent to the database.",
        ))
        .property(
            "decision_visibility",
            list(
                "A content restriction: a hide is DECISION_VISIBILITY_CONTENT_DISABLED, a restricting label its rule's `labels_visibility` (default DECISION_VISIBILITY_CONTENT_LABELLED)",
                &[
                    "DECISION_VISIBILITY_CONTENT_DISABLED",
                    "DECISION_VISIBILITY_CONTENT_DEMOTED",
                    "DECISION_VISIBILITY_CONTENT_AGE_RESTRICTED",
                    "DECISION_VISIBILITY_CONTENT_INTERACTION_RESTRICTED",
                    "DECISION_VISIBILITY_CONTENT_LABELLED",
                ],
            ),
        )
        .property(
            "decision_account",
            one_of("A suspension of an account kind", &["DECISION_ACCOUNT_SUSPENDED"]),
        )
        .property(
            "decision_provision",
            one_of(
                "A suspension of any other kind",
                &["DECISION_PROVISION_PARTIAL_SUSPENSION"],
            ),
        )
        .property("account_type", one_of("The kind's account type", ACCOUNT_TYPES))
        .property(
            "decision_ground",
            one_of(
                "The law or the terms",
                &[
                    "DECISION_GROUND_ILLEGAL_CONTENT",
                    "DECISION_GROUND_INCOMPATIBLE_CONTENT",
                ],
            ),
        )
        .property(
            "decision_ground_reference_url",
            text("Where the ground relied on can be read"),
        )
        .property("illegal_content_legal_ground", text("For an illegal ground"))
        .property("illegal_content_explanation", text("For an illegal ground"))
        .property("incompatible_content_ground", text("For incompatibility"))
        .property(
            "incompatible_content_explanation",
            text("For incompatibility"),
        )
        .property(
            "incompatible_content_illegal",
            one_of("For incompatibility: illegal too", &["Yes", "No"]),
        )
        .property("content_type", list("What the content is", CONTENT_TYPES))
        .property("content_type_other", text("With CONTENT_TYPE_OTHER"))
        .property("category", one_of("The category", CATEGORIES))
        .property("category_addition", list("More categories", CATEGORIES))
        .property(
            "category_specification",
            list("The category's keywords", KEYWORDS),
        )
        .property("category_specification_other", text("With KEYWORD_OTHER"))
        .property(
            "territorial_scope",
            list("Where the decision applies", COUNTRY_CODES),
        )
        .property("content_language", one_of("The content's language", LANGUAGES))
        .property(
            "content_date",
            day("The day the content was posted (the sender's `content_date`, else the entity's first event's)"),
        )
        .property("application_date", day("The day the decision was taken"))
        .property(
            "end_date_visibility_restriction",
            day("The end of a timed hide"),
        )
        .property(
            "end_date_account_restriction",
            day("The end of a timed account suspension"),
        )
        .property(
            "end_date_service_restriction",
            day("The end of a timed suspension of another kind"),
        )
        .property("decision_facts", text("The rule, its condition and the figures"))
        .property(
            "source_type",
            one_of(
                "Where the decision came from",
                &["SOURCE_ARTICLE_16", "SOURCE_TRUSTED_FLAGGER", "SOURCE_VOLUNTARY"],
            ),
        )
        .property(
            "automated_detection",
            one_of("Detected by automation", &["Yes", "No"]),
        )
        .property(
            "automated_decision",
            one_of(
                "A rule's decision FULLY, a review decision PARTIALLY, another moderator's NOT_AUTOMATED",
                &[
                    "AUTOMATED_DECISION_FULLY",
                    "AUTOMATED_DECISION_PARTIALLY",
                    "AUTOMATED_DECISION_NOT_AUTOMATED",
                ],
            ),
        )
        .property("puid", text("The platform unique identifier, `quiesce-<UUID>`"))
        .property("quiesce_url", text("quiesce's own: where the content is"))
        .property(
            "quiesce_ends_at",
            text("quiesce's own: when a timed restriction ends (RFC 3339)"),
        )
        .property(
            "quiesce_keywords",
            ArrayBuilder::new()
                .items(ObjectBuilder::new().schema_type(Type::String))
                .description(Some("quiesce's own: the rule's keywords")),
        )
        .required("decision_ground")
        .required("content_type")
        .required("category")
        .required("content_date")
        .required("application_date")
        .required("decision_facts")
        .required("source_type")
        .required("automated_detection")
        .required("automated_decision")
        .required("puid")
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lists_have_the_databases_lengths_and_every_old_category_maps_into_them() {
        assert_eq!(CATEGORIES.len(), 16);
        assert_eq!(KEYWORDS.len(), 69);
        assert_eq!(COUNTRY_CODES.len(), 30);
        assert_eq!(LANGUAGES.len(), 184);
        for (_, new) in CATEGORIES_2023 {
            assert!(CATEGORIES.contains(new), "{new}");
        }
        assert_eq!(
            category_for_2023("STATEMENT_CATEGORY_VIOLATION_TOS"),
            Some("STATEMENT_CATEGORY_OTHER_VIOLATION_TC")
        );
        assert_eq!(category_for_2023("STATEMENT_CATEGORY_VIOLENCE"), None);
    }

    #[test]
    fn a_content_date_is_a_real_day_within_the_bounds() {
        assert_eq!(
            parse_content_date("2026-11-30"),
            Ok(NaiveDate::from_ymd_opt(2026, 11, 30).unwrap())
        );
        for bad in [
            "2026-11-31",
            "2026-1-30",
            "30/11/2026",
            "1999-12-31",
            "2038-01-02",
            "",
        ] {
            assert!(parse_content_date(bad).is_err(), "{bad}");
        }
        assert!(parse_content_date("2000-01-01").is_ok());
        assert!(parse_content_date("2038-01-01").is_ok());
    }
}
