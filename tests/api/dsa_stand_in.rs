//! The DSA Transparency Database stand-in answers as the Commission's code does: the cases are
//! those of its own tests (digital-services-act/transparency-database at 69e80a0b:
//! `StatementMultipleAPIControllerTest`, and `StatementAPIControllerTest` for the rules the
//! batch endpoint shares), with their `required_fields` statement as the base.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{
    ACCOUNT_TYPES, AUTOMATED_DECISIONS, CATEGORIES, CONTENT_TYPES, COUNTRY_CODES,
    DECISION_ACCOUNTS, DECISION_MONETARIES, DECISION_PROVISIONS, DECISION_VISIBILITIES,
    DSA_MAX_BATCH, DsaStandIn, KEYWORDS, LANGUAGES, SOURCE_TYPES, wait_for,
};

/// The Commission's test statement (its `required_fields`) with `puid`.
fn statement(puid: &str) -> Value {
    json!({
        "decision_visibility": [
            "DECISION_VISIBILITY_CONTENT_DISABLED",
            "DECISION_VISIBILITY_CONTENT_AGE_RESTRICTED",
        ],
        "decision_monetary": null,
        "decision_provision": null,
        "decision_account": null,
        "decision_ground": "DECISION_GROUND_ILLEGAL_CONTENT",
        "category": "STATEMENT_CATEGORY_ANIMAL_WELFARE",
        "illegal_content_legal_ground": "foo",
        "illegal_content_explanation": "bar",
        "puid": puid,
        "territorial_scope": ["BE", "DE", "FR"],
        "source_type": "SOURCE_ARTICLE_16",
        "source_identity": "foo",
        "decision_facts": "decision and facts",
        "content_type": ["CONTENT_TYPE_SYNTHETIC_MEDIA"],
        "automated_detection": "No",
        "automated_decision": "AUTOMATED_DECISION_PARTIALLY",
        "application_date": "2023-05-18",
        "content_date": "2023-05-18",
    })
}

/// `statement(puid)` with `changes` made (`"-"` removes the field; a null sets it null).
fn with(puid: &str, changes: Value) -> Value {
    let mut statement = statement(puid);
    let fields = statement.as_object_mut().unwrap();
    for (field, value) in changes.as_object().unwrap() {
        if value == "-" {
            fields.remove(field);
        } else {
            fields.insert(field.clone(), value.clone());
        }
    }
    statement
}

/// Posts `body` as a platform does: JSON, with the token and `Accept: application/json`.
async fn post(dsa: &DsaStandIn, token: Option<&str>, body: &Value) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}/statements", dsa.endpoint()))
        .header("accept", "application/json")
        .json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn send(dsa: &DsaStandIn, statements: Vec<Value>) -> (u16, Value) {
    post(
        dsa,
        Some(&dsa.token()),
        &json!({ "statements": statements }),
    )
    .await
}

/// The errors of a batch of one refused statement: field -> messages.
async fn refused(dsa: &DsaStandIn, statement: Value) -> Value {
    let before = dsa.accepted().len();
    let (status, body) = send(dsa, vec![statement]).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        dsa.accepted().len(),
        before,
        "a refused batch stores nothing"
    );
    body["errors"]["statement_0"].clone()
}

/// The stored statement of `puid`.
fn stored(dsa: &DsaStandIn, puid: &str) -> Value {
    dsa.accepted()
        .into_iter()
        .find(|s| s["puid"] == puid)
        .unwrap_or_else(|| panic!("{puid} is not stored"))
}

#[tokio::test]
async fn ten_statements_are_stored_and_given_back_as_the_controller_builds_them() {
    let dsa = DsaStandIn::start().await;
    let batch: Vec<Value> = (0..10)
        .map(|i| with(&format!("p{i}"), json!({"application_date": "2023-12-20"})))
        .collect();
    let (status, body) = send(&dsa, batch).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(dsa.accepted().len(), 10);
    let given = &body["statements"][0];
    assert_eq!(given["puid"], "p0");
    assert_eq!(given["category"], "STATEMENT_CATEGORY_ANIMAL_WELFARE");
    assert!(
        given["uuid"].as_str().is_some_and(|u| u.len() == 36),
        "{given}"
    );
    assert!(
        given["permalink"]
            .as_str()
            .unwrap()
            .ends_with(given["uuid"].as_str().unwrap())
    );
    // buildOutputJsonResponse: what was not sent is an empty list or a null.
    assert_eq!(given["category_addition"], json!([]));
    assert_eq!(given["content_id_ean"], Value::Null);
    assert_eq!(given["end_date_visibility_restriction"], Value::Null);
    assert_eq!(dsa.requests(), 1);
    assert!(dsa.rejections().is_empty());
}

#[tokio::test]
async fn every_key_of_every_enumeration_is_accepted() {
    let dsa = DsaStandIn::start().await;
    let mut batch = Vec::new();
    let mut each = |field: &str, values: &[&str]| {
        for value in values {
            batch.push(with(
                &format!("{field}-{}", batch.len()),
                json!({ field: value }),
            ));
        }
    };
    each("category", CATEGORIES);
    each("source_type", SOURCE_TYPES);
    each("automated_decision", AUTOMATED_DECISIONS);
    each("account_type", ACCOUNT_TYPES);
    each("decision_account", DECISION_ACCOUNTS);
    each("decision_provision", DECISION_PROVISIONS);
    let (status, body) = send(&dsa, batch).await;
    assert_eq!(status, 201, "{body}");

    let mut lists = vec![
        with(
            "lists-1",
            json!({
                "decision_visibility": DECISION_VISIBILITIES,
                "decision_visibility_other": "shown to members only",
                "content_type": CONTENT_TYPES,
                "content_type_other": "a poll",
                "category_addition": CATEGORIES,
                "territorial_scope": COUNTRY_CODES,
            }),
        ),
        with(
            "lists-2",
            json!({ "category_specification": KEYWORDS, "category_specification_other": "x" }),
        ),
    ];
    for (i, monetary) in DECISION_MONETARIES.iter().enumerate() {
        lists.push(with(
            &format!("monetary-{i}"),
            json!({ "decision_monetary": monetary, "decision_monetary_other": "fees held" }),
        ));
    }
    for chunk in LANGUAGES.chunks(90) {
        let batch: Vec<Value> = chunk
            .iter()
            .map(|language| {
                with(
                    &format!("language-{language}"),
                    json!({ "content_language": language }),
                )
            })
            .collect();
        let (status, body) = send(&dsa, batch).await;
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = send(&dsa, lists).await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn a_content_language_is_one_of_the_languages_in_upper_case() {
    let dsa = DsaStandIn::start().await;
    // StatementMultipleAPIControllerTest::test_api_statements_store_validates
    let mut batch: Vec<Value> = (0..10).map(|i| statement(&format!("p{i}"))).collect();
    batch[3]["content_language"] = json!("XX");
    let (status, body) = send(&dsa, batch).await;
    assert_eq!(status, 422);
    assert_eq!(
        body["errors"]["statement_3"]["content_language"][0],
        "The selected content language is invalid."
    );
    assert!(dsa.accepted().is_empty());
    let errors = refused(&dsa, with("a", json!({"content_language": "en"}))).await;
    assert_eq!(
        errors["content_language"][0],
        "The selected content language is invalid."
    );
    let (status, body) = send(&dsa, vec![with("b", json!({"content_language": "VI"}))]).await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn values_in_place_of_keys_and_the_2023_values_are_refused() {
    let dsa = DsaStandIn::start().await;
    for (field, value) in [
        ("category", json!("STATEMENT_CATEGORY_VIOLATION_TOS")),
        ("category", json!("Animal welfare")),
        ("automated_decision", json!("Yes")),
        ("decision_ground", json!("Illegal Content")),
        ("account_type", json!("ACCOUNT_TYPE_SHOP")),
        ("source_type", json!("SOURCE_NOTICE")),
        ("automated_detection", json!("Fully automated")),
    ] {
        let errors = refused(&dsa, with("a", json!({ field: value }))).await;
        let name = field.replace('_', " ");
        assert_eq!(
            errors,
            json!({ field: [format!("The selected {name} is invalid.")] }),
            "{field}: {value}"
        );
    }
    for (field, value) in [
        ("territorial_scope", json!(["XY", "DE"])),
        ("category_addition", json!(["STATEMENT_CATEGORY_FRAUD"])),
        ("category_specification", json!(["KEYWORD_SPAM"])),
        (
            "decision_visibility",
            json!(["DECISION_VISIBILITY_CONTENT_HIDDEN"]),
        ),
    ] {
        let errors = refused(&dsa, with("a", json!({ field: value }))).await;
        let name = field.replace('_', " ");
        assert_eq!(
            errors[field],
            json!([format!("The selected {name} is invalid.")])
        );
    }
}

#[tokio::test]
async fn the_list_fields_take_lists_only() {
    let dsa = DsaStandIn::start().await;
    // test_it_should_only_accept_arrays_as_content_type (and as decision_visibility)
    let errors = refused(
        &dsa,
        with("a", json!({"content_type": "CONTENT_TYPE_OTHER"})),
    )
    .await;
    assert_eq!(
        errors,
        json!({"content_type": ["The content type field must be an array."]})
    );
    let visibility = json!({"decision_visibility": "DECISION_VISIBILITY_CONTENT_REMOVED"});
    let errors = refused(&dsa, with("a", visibility)).await;
    assert_eq!(
        errors,
        json!({"decision_visibility": ["The decision visibility field must be an array."]})
    );
    for field in [
        "category_addition",
        "territorial_scope",
        "category_specification",
    ] {
        let errors = refused(&dsa, with("a", json!({ field: "DE" }))).await;
        let name = field.replace('_', " ");
        assert_eq!(
            errors[field][0],
            format!("The {name} field must be an array.")
        );
    }
}

#[tokio::test]
async fn an_other_visibility_or_content_type_needs_its_words_which_are_dropped_otherwise() {
    let dsa = DsaStandIn::start().await;
    // test_it_should_require_decision_visibility_other_field_when_sending_multiple_statements
    let batch = vec![
        with(
            "a",
            json!({"decision_visibility": ["DECISION_VISIBILITY_OTHER"], "decision_visibility_other": "required field"}),
        ),
        with(
            "b",
            json!({"decision_visibility": ["DECISION_VISIBILITY_OTHER"], "decision_visibility_other": "-"}),
        ),
        with(
            "c",
            json!({"decision_visibility": ["DECISION_VISIBILITY_OTHER"], "decision_visibility_other": null}),
        ),
        with(
            "d",
            json!({"decision_visibility": ["DECISION_VISIBILITY_CONTENT_LABELLED"], "decision_visibility_other": null}),
        ),
        with(
            "e",
            json!({"decision_visibility": ["DECISION_VISIBILITY_CONTENT_DEMOTED", "DECISION_VISIBILITY_OTHER"], "decision_visibility_other": null}),
        ),
    ];
    let (status, body) = send(&dsa, batch).await;
    assert_eq!(status, 422);
    let required = json!(["The decision visibility other field is required."]);
    assert_eq!(
        body["errors"],
        json!({
            "statement_1": {"decision_visibility_other": required},
            "statement_2": {"decision_visibility_other": required},
            "statement_4": {"decision_visibility_other": required},
        })
    );
    // test_it_should_require_descriptions_when_other_fields_are_sent_via_multiple_statements
    let batch = vec![
        with(
            "a",
            json!({"content_type": ["CONTENT_TYPE_OTHER"], "content_type_other": "required field"}),
        ),
        with(
            "b",
            json!({"content_type": ["CONTENT_TYPE_OTHER"], "content_type_other": "-"}),
        ),
        with(
            "c",
            json!({"content_type": ["CONTENT_TYPE_OTHER"], "content_type_other": null}),
        ),
        with(
            "d",
            json!({"content_type": ["CONTENT_TYPE_IMAGE"], "content_type_other": null}),
        ),
        with(
            "e",
            json!({"content_type": ["CONTENT_TYPE_IMAGE", "CONTENT_TYPE_OTHER"], "content_type_other": null}),
        ),
    ];
    let (status, body) = send(&dsa, batch).await;
    assert_eq!(status, 422);
    let required = json!(["The content type other field is required."]);
    assert_eq!(
        body["errors"],
        json!({
            "statement_1": {"content_type_other": required},
            "statement_2": {"content_type_other": required},
            "statement_4": {"content_type_other": required},
        })
    );
    assert!(dsa.accepted().is_empty());

    // test_store_multiple_with_different_decision_visibility and ..._content_types: the words
    // kept where they apply, dropped where they do not.
    let batch = vec![
        with(
            "vis-a",
            json!({"decision_visibility": ["DECISION_VISIBILITY_CONTENT_REMOVED", "DECISION_VISIBILITY_OTHER"], "decision_visibility_other": "kept"}),
        ),
        with(
            "vis-b",
            json!({"decision_visibility": ["DECISION_VISIBILITY_CONTENT_REMOVED"], "decision_visibility_other": "dropped"}),
        ),
        with(
            "type-a",
            json!({"content_type": ["CONTENT_TYPE_OTHER"], "content_type_other": "a poll"}),
        ),
        with(
            "type-b",
            json!({"content_type": ["CONTENT_TYPE_IMAGE"], "content_type_other": "dropped"}),
        ),
    ];
    let (status, body) = send(&dsa, batch).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(stored(&dsa, "vis-a")["decision_visibility_other"], "kept");
    assert_eq!(
        stored(&dsa, "vis-b")["decision_visibility_other"],
        Value::Null
    );
    assert_eq!(stored(&dsa, "type-a")["content_type_other"], "a poll");
    assert_eq!(stored(&dsa, "type-b")["content_type_other"], Value::Null);
}

#[tokio::test]
async fn the_other_words_of_a_monetary_decision_a_specification_and_a_voluntary_source_are_kept_only_where_they_apply()
 {
    let dsa = DsaStandIn::start().await;
    let batch = vec![
        // test_store_multiple_with_different_decision_monetary
        with(
            "mon-a",
            json!({"decision_monetary": "DECISION_MONETARY_OTHER", "decision_monetary_other": "should be persisted"}),
        ),
        with(
            "mon-b",
            json!({"decision_monetary": "DECISION_MONETARY_SUSPENSION", "decision_monetary_other": "should not be persisted"}),
        ),
        // test_store_multiple_with_different_category_specifications
        with(
            "spec-a",
            json!({"category_specification": ["KEYWORD_OTHER"], "category_specification_other": "kept"}),
        ),
        with(
            "spec-b",
            json!({"category_specification": ["KEYWORD_BIOMETRIC_DATA_BREACH"], "category_specification_other": "dropped"}),
        ),
        // test_store_multiple_with_different_source_type
        with(
            "src-a",
            json!({"source_type": "SOURCE_VOLUNTARY", "source_identity": "should not be persisted"}),
        ),
        with(
            "src-b",
            json!({"source_type": "SOURCE_TRUSTED_FLAGGER", "source_identity": "source identity required field"}),
        ),
        with(
            "src-c",
            json!({"source_type": "SOURCE_TRUSTED_FLAGGER", "source_identity": "-"}),
        ),
    ];
    let (status, body) = send(&dsa, batch).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        stored(&dsa, "mon-a")["decision_monetary_other"],
        "should be persisted"
    );
    assert_eq!(
        stored(&dsa, "mon-b")["decision_monetary_other"],
        Value::Null
    );
    assert_eq!(
        stored(&dsa, "spec-a")["category_specification_other"],
        "kept"
    );
    assert_eq!(
        stored(&dsa, "spec-b")["category_specification_other"],
        Value::Null
    );
    assert_eq!(stored(&dsa, "src-a")["source_identity"], Value::Null);
    assert_eq!(
        stored(&dsa, "src-b")["source_identity"],
        "source identity required field"
    );
    let errors = refused(
        &dsa,
        with("x", json!({"decision_monetary": "DECISION_MONETARY_OTHER"})),
    )
    .await;
    assert_eq!(
        errors,
        json!({"decision_monetary_other": ["The decision monetary other field is required when decision monetary is other."]})
    );
}

#[tokio::test]
async fn the_ground_specific_fields_are_required_for_their_ground_and_dropped_for_the_other() {
    let dsa = DsaStandIn::start().await;
    let errors = refused(
        &dsa,
        with("a", json!({"illegal_content_legal_ground": "-"})),
    )
    .await;
    assert_eq!(
        errors,
        json!({ "illegal_content_legal_ground": [
            "The illegal content legal ground field is required when decision ground is illegal content."
        ] })
    );
    let errors = refused(&dsa, with("a", json!({"illegal_content_explanation": "-"}))).await;
    assert_eq!(
        errors,
        json!({ "illegal_content_explanation": [
            "The illegal content explanation field is required when decision ground is illegal content."
        ] })
    );
    // A field of the other ground is checked before its exclusion: a null
    // "incompatible_content_illegal" refuses an illegal-content statement.
    let errors = refused(
        &dsa,
        with("a", json!({"incompatible_content_illegal": null})),
    )
    .await;
    assert_eq!(
        errors,
        json!({ "incompatible_content_illegal": ["The selected incompatible content illegal is invalid."] })
    );
    let incompatible = json!({
        "decision_ground": "DECISION_GROUND_INCOMPATIBLE_CONTENT",
        "incompatible_content_ground": "foobar",
    });
    let errors = refused(&dsa, with("a", incompatible.clone())).await;
    assert_eq!(
        errors,
        json!({ "incompatible_content_explanation": [
            "The incompatible content explanation field is required when decision ground is incompatible content."
        ] })
    );
    // test_store_multiple_with_different_decision_grounds
    let mut complete = incompatible;
    complete["incompatible_content_explanation"] = json!("foobar2");
    complete["incompatible_content_illegal"] = json!("Yes");
    let (status, body) = send(&dsa, vec![with("b", complete)]).await;
    assert_eq!(status, 201, "{body}");
    let kept = stored(&dsa, "b");
    assert_eq!(kept["illegal_content_legal_ground"], Value::Null, "{kept}");
    assert_eq!(kept["illegal_content_explanation"], Value::Null, "{kept}");
    assert_eq!(kept["incompatible_content_illegal"], "Yes");
    assert!(
        body["statements"][0]
            .get("illegal_content_legal_ground")
            .unwrap()
            .is_null()
    );
}

#[tokio::test]
async fn dates_are_days_within_their_bounds() {
    let dsa = DsaStandIn::start().await;
    // test_request_rejects_bad_dates: the 2023 schema's hour is not a day.
    for bad in [
        "2023-05-18-07",
        "2023-4-4",
        "2023-02-30",
        "2023-05-18 07:00:00",
        "18/05/2023",
    ] {
        let errors = refused(&dsa, with("a", json!({ "application_date": bad }))).await;
        assert_eq!(
            errors["application_date"][0],
            "The application date does not match the format YYYY-MM-DD.",
            "{bad}"
        );
    }
    let errors = refused(&dsa, with("a", json!({ "content_date": "-" }))).await;
    assert_eq!(
        errors,
        json!({ "content_date": ["The content date field is required."] })
    );
    let errors = refused(&dsa, with("a", json!({ "content_date": "1999-12-31" }))).await;
    assert_eq!(
        errors,
        json!({ "content_date": ["The content date field must be a date after or equal to 2000-01-01."] })
    );
    let errors = refused(&dsa, with("a", json!({ "application_date": "2019-12-31" }))).await;
    assert_eq!(
        errors,
        json!({ "application_date": ["The application date field must be a date after or equal to 2020-01-01."] })
    );
    // Read leniently for the comparisons, a date in no format is outside both bounds too.
    let errors = refused(&dsa, with("a", json!({ "content_date": "18/05/2023" }))).await;
    assert_eq!(
        errors,
        json!({ "content_date": [
            "The content date does not match the format YYYY-MM-DD.",
            "The content date field must be a date after or equal to 2000-01-01.",
            "The content date field must be a date before or equal to 2038-01-01.",
        ] })
    );
    for field in [
        "end_date_account_restriction",
        "end_date_monetary_restriction",
        "end_date_service_restriction",
        "end_date_visibility_restriction",
    ] {
        let what = field
            .trim_start_matches("end_date_")
            .trim_end_matches("_restriction");
        let errors = refused(&dsa, with("a", json!({ field: "2023-08-10-00" }))).await;
        assert_eq!(
            errors[field][0],
            format!("The end date of {what} restriction does not match the format YYYY-MM-DD.")
        );
        let errors = refused(&dsa, with("a", json!({ field: "2038-01-02" }))).await;
        let name = field.replace('_', " ");
        assert_eq!(
            errors[field][0],
            format!("The {name} field must be a date before or equal to 2038-01-01.")
        );
    }
    // test_store_should_save_end_dates; there is no `end_date`, nor `url`: they are dropped.
    let ends = json!({
        "end_date_visibility_restriction": "2023-08-10",
        "end_date_monetary_restriction": "2023-08-11",
        "end_date_service_restriction": "2023-08-12",
        "end_date_account_restriction": "2023-08-13",
        "end_date": "2023-08-14-00",
        "url": "https://www.test.com",
    });
    let (status, body) = send(&dsa, vec![with("b", ends)]).await;
    assert_eq!(status, 201, "{body}");
    let kept = stored(&dsa, "b");
    assert_eq!(kept["end_date_account_restriction"], "2023-08-13");
    assert!(
        kept.get("end_date").is_none() && kept.get("url").is_none(),
        "{kept}"
    );
    let (status, body) = send(
        &dsa,
        vec![with(
            "c",
            json!({"content_date": "2000-01-01", "application_date": "2038-01-01"}),
        )],
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn texts_urls_and_content_ids_have_their_rules() {
    let dsa = DsaStandIn::start().await;
    let errors = refused(
        &dsa,
        with("a", json!({ "decision_facts": "x".repeat(5001) })),
    )
    .await;
    assert_eq!(
        errors,
        json!({ "decision_facts": ["The decision facts field must not be greater than 5000 characters."] })
    );
    let errors = refused(
        &dsa,
        with(
            "a",
            json!({ "illegal_content_legal_ground": "é".repeat(501) }),
        ),
    )
    .await;
    assert_eq!(
        errors["illegal_content_legal_ground"],
        json!(["The illegal content legal ground field must not be greater than 500 characters."])
    );
    // test_api_statement_store_rejects_bad_decision_ground_urls / accepts_google_..
    let errors = refused(
        &dsa,
        with(
            "a",
            json!({ "decision_ground_reference_url": "notvalidurl" }),
        ),
    )
    .await;
    assert_eq!(
        errors,
        json!({ "decision_ground_reference_url": ["The decision ground reference url field must be a valid URL."] })
    );
    // test_rejects_invalid_ean13_content_id
    for bad in ["123456789012", "12345678901AB"] {
        let errors = refused(&dsa, with("a", json!({ "content_id": {"EAN-13": bad} }))).await;
        assert_eq!(
            errors,
            json!({ "content_id.EAN-13": ["The content id. e a n-13 field format is invalid."] })
        );
    }
    // Characters are counted, not bytes; and a blank required field is a missing one.
    let fine = json!({
        "decision_facts": "é".repeat(5000),
        "decision_ground_reference_url": "https://www.goodurl.com",
        "content_id": {"EAN-13": "1111111111111"},
    });
    let (status, body) = send(&dsa, vec![with("b", fine)]).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(stored(&dsa, "b")["content_id_ean"], "1111111111111");
    let errors = refused(&dsa, with("c", json!({ "decision_facts": "  " }))).await;
    assert_eq!(
        errors,
        json!({ "decision_facts": ["The decision facts field is required."] })
    );
}

#[tokio::test]
async fn a_statement_needs_at_least_one_decision() {
    let dsa = DsaStandIn::start().await;
    let errors = refused(&dsa, with("a", json!({ "decision_visibility": null }))).await;
    let message = |field: &str, others: &str| {
        json!([format!(
            "The {field} field is required when none of {others} are present."
        )])
    };
    assert_eq!(
        errors,
        json!({
            "decision_visibility": message(
                "decision visibility", "decision monetary / decision provision / decision account"),
            "decision_monetary": message(
                "decision monetary", "decision visibility / decision provision / decision account"),
            "decision_provision": message(
                "decision provision", "decision visibility / decision monetary / decision account"),
            "decision_account": message(
                "decision account", "decision visibility / decision monetary / decision provision"),
        })
    );
    // test_store_multiple_statements_with_different_attributes_should_be_persisted_and_visible:
    // the light one, with a monetary decision only.
    let light = json!({
        "decision_visibility": "-", "decision_monetary": "DECISION_MONETARY_TERMINATION",
        "decision_provision": "-", "decision_account": "-",
    });
    let account =
        json!({ "decision_visibility": null, "decision_account": "DECISION_ACCOUNT_SUSPENDED" });
    let (status, body) = send(&dsa, vec![with("light", light), with("account", account)]).await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn territories_are_kept_once_and_sorted_and_additional_categories_default_to_none() {
    let dsa = DsaStandIn::start().await;
    // test_it_should_deduplicate_territories, test_store_multiple_with_category_addition
    let batch = vec![
        with(
            "a",
            json!({"territorial_scope": ["DE", "ES", "PT", "DE", "ES", "PT", "PT"]}),
        ),
        with("b", json!({"category_addition": []})),
        with(
            "c",
            json!({"category_addition": "-", "territorial_scope": "-"}),
        ),
    ];
    let (status, body) = send(&dsa, batch).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        stored(&dsa, "a")["territorial_scope"],
        json!(["DE", "ES", "PT"])
    );
    assert_eq!(stored(&dsa, "b")["category_addition"], json!([]));
    assert_eq!(stored(&dsa, "c")["category_addition"], Value::Null);
    assert_eq!(body["statements"][2]["category_addition"], json!([]));
    assert_eq!(stored(&dsa, "c")["territorial_scope"], json!([]));
}

#[tokio::test]
async fn a_puid_is_required_and_made_of_letters_digits_dashes_and_underscores() {
    let dsa = DsaStandIn::start().await;
    let errors = refused(&dsa, with("", json!({}))).await;
    assert_eq!(errors, json!({ "puid": ["The puid field is required."] }));
    // test_it_should_reject_bad_puids
    let (status, body) = send(
        &dsa,
        vec![
            statement("very bad + â pu+id !"),
            statement("very bad + â pu+id !"),
        ],
    )
    .await;
    assert_eq!(status, 422);
    assert_eq!(
        body["errors"]["statement_0"]["puid"][0],
        "The puid format is invalid."
    );
    assert_eq!(
        body["errors"]["statement_1"]["puid"][0],
        "The puid format is invalid."
    );
    let errors = refused(&dsa, statement(&"a".repeat(501))).await;
    assert_eq!(
        errors,
        json!({ "puid": ["The puid field must not be greater than 500 characters."] })
    );
    let (status, body) = send(&dsa, vec![statement("foo-bar_123")]).await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn one_invalid_statement_refuses_the_whole_batch_naming_it_by_index() {
    let dsa = DsaStandIn::start().await;
    let batch = vec![
        statement("a"),
        with("b", json!({ "category": "nope" })),
        statement("c"),
        with("d", json!({ "source_type": "-" })),
    ];
    let (status, body) = send(&dsa, batch).await;
    assert_eq!(status, 422);
    assert_eq!(
        body,
        json!({ "errors": {
            "statement_1": { "category": ["The selected category is invalid."] },
            "statement_3": { "source_type": ["The source type field is required."] },
        } })
    );
    assert!(dsa.accepted().is_empty());
    assert_eq!(dsa.rejections(), [(422, body)]);
}

#[tokio::test]
async fn a_batch_holds_one_to_a_hundred_statements() {
    let dsa = DsaStandIn::start().await;
    let over: Vec<Value> = (0..=DSA_MAX_BATCH)
        .map(|i| statement(&format!("p{i}")))
        .collect();
    let (status, body) = send(&dsa, over).await;
    assert_eq!(status, 422);
    let message = "The statements field must have between 1 and 100 items.";
    assert_eq!(
        body,
        json!({ "message": message, "errors": { "statements": [message] } })
    );
    let (status, body) = send(&dsa, vec![]).await;
    assert_eq!(status, 422);
    assert_eq!(
        body["errors"]["statements"],
        json!(["The statements field is required."])
    );
    // The statements themselves as the body, without the `statements` key.
    let (status, body) = post(&dsa, Some(&dsa.token()), &json!([statement("p")])).await;
    assert_eq!(status, 422);
    assert_eq!(
        body["errors"]["statements"],
        json!(["The statements field is required."])
    );
    assert!(dsa.accepted().is_empty());

    let full: Vec<Value> = (0..DSA_MAX_BATCH)
        .map(|i| statement(&format!("p{i}")))
        .collect();
    let (status, body) = send(&dsa, full).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(dsa.accepted().len(), DSA_MAX_BATCH);
}

#[tokio::test]
async fn a_puid_already_stored_refuses_the_batch_and_is_named() {
    let dsa = DsaStandIn::start().await;
    // test_api_statements_store_detects_previous_puid
    let (status, _) = send(&dsa, vec![statement("first"), statement("second")]).await;
    assert_eq!(status, 201);
    let (status, body) = send(&dsa, vec![statement("new"), statement("second")]).await;
    assert_eq!(status, 422);
    let message = "The platform identifier(s) are not all unique within this call.";
    assert_eq!(
        body,
        json!({ "message": message, "errors": { "puid": [message], "existing_puids": ["second"] } })
    );
    assert_eq!(dsa.accepted_puids(), ["first", "second"]);
}

#[tokio::test]
async fn a_puid_twice_in_one_batch_refuses_it_and_is_named_once() {
    let dsa = DsaStandIn::start().await;
    // test_api_statements_store_detect_non_unique_in_call
    let batch = vec![
        statement("x"),
        statement("y"),
        statement("x"),
        statement("x"),
    ];
    let (status, body) = send(&dsa, batch).await;
    assert_eq!(status, 422);
    assert_eq!(body["errors"]["existing_puids"], json!(["x"]));
    assert!(dsa.accepted().is_empty());
}

#[tokio::test]
async fn without_the_token_nothing_is_stored() {
    let dsa = DsaStandIn::start().await;
    // test_api_statements_store_requires_auth
    let batch = json!({ "statements": [statement("a")] });
    for token in [None, Some("1|wrong")] {
        let (status, body) = post(&dsa, token, &batch).await;
        assert_eq!(status, 401);
        assert_eq!(body, json!({ "message": "Unauthenticated." }));
    }
    // Not asking for JSON, the way to the login page.
    let response = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(format!("{}/statements", dsa.endpoint()))
        .json(&batch)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 302);
    assert!(dsa.accepted().is_empty());
    assert_eq!(dsa.requests(), 3);
    assert_eq!(dsa.rejections().len(), 3);
}

#[tokio::test]
async fn a_token_over_its_rate_is_answered_429_with_retry_after_until_its_window_ends() {
    let dsa = DsaStandIn::start().await;
    dsa.limit(&[(2, Duration::from_secs(2))]);
    let batch = |puid: &str| json!({ "statements": [statement(puid)] });
    let (first, _) = post(&dsa, Some(&dsa.token()), &batch("a")).await;
    let (second, _) = post(&dsa, Some(&dsa.token()), &batch("b")).await;
    assert_eq!((first, second), (201, 201));
    let response = reqwest::Client::new()
        .post(format!("{}/statements", dsa.endpoint()))
        .header("accept", "application/json")
        .bearer_auth(dsa.token())
        .json(&batch("c"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "2");
    assert_eq!(response.headers()["x-ratelimit-remaining"], "0");
    assert_eq!(
        response.text().await.unwrap(),
        "Limit Reached. Please do not overload the API"
    );
    assert_eq!(dsa.accepted_puids(), ["a", "b"]);
    let limited = dsa.request_log()[2];
    assert_eq!((limited.status, limited.retry_after), (429, Some(2)));
    // Refused requests spend nothing; once the window is over, the token is served again.
    wait_for(Duration::from_secs(5), "the window to end", || async {
        post(&dsa, Some(&dsa.token()), &batch("c")).await.0 == 201
    })
    .await;
    let served = dsa.request_log().last().copied().unwrap();
    assert!(served.arrived.duration_since(limited.arrived) >= Duration::from_millis(1500));
    assert_eq!(dsa.accepted_puids(), ["a", "b", "c"]);
}

#[tokio::test]
async fn a_lost_answer_still_stores_the_batch_so_its_retry_meets_its_own_puids() {
    let dsa = DsaStandIn::start().await;
    dsa.lose_next_answers(1);
    let (status, body) = send(&dsa, vec![statement("a"), statement("b")]).await;
    assert_eq!(status, 500);
    assert_eq!(body, json!({ "message": "Server Error" }));
    assert_eq!(dsa.accepted_puids(), ["a", "b"]);

    let (status, body) = send(&dsa, vec![statement("a"), statement("b")]).await;
    assert_eq!(status, 422);
    assert_eq!(body["errors"]["existing_puids"], json!(["a", "b"]));
    assert_eq!(dsa.accepted_puids(), ["a", "b"]);
    assert_eq!(dsa.requests(), 2);
    let statuses: Vec<u16> = dsa.rejections().iter().map(|(status, _)| *status).collect();
    assert_eq!(statuses, [500, 422]);
}
