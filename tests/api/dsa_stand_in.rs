//! The DSA Transparency Database stand-in answers as the Commission's code does: the cases are
//! those of its own tests (StatementAPIControllerTest at 006d22e9 for the rules,
//! StatementMultipleAPIControllerTest for the batch), with their statement as the base.

use serde_json::{Value, json};

use crate::helpers::{CATEGORIES, CONTENT_TYPES, DSA_MAX_BATCH, DsaStandIn, SOURCE_TYPES, YES_NO};

/// The Commission's test statement (its `required_fields`) with `puid`.
fn statement(puid: &str) -> Value {
    json!({
        "decision_visibility": "DECISION_VISIBILITY_CONTENT_DISABLED",
        "decision_ground": "DECISION_GROUND_ILLEGAL_CONTENT",
        "category": "STATEMENT_CATEGORY_FRAUD",
        "illegal_content_legal_ground": "foo",
        "illegal_content_explanation": "bar",
        "url": "https://www.test.com",
        "puid": puid,
        "territorial_scope": ["BE", "DE", "FR"],
        "source_type": "SOURCE_ARTICLE_16",
        "source": "foo",
        "decision_facts": "decision and facts",
        "content_type": ["CONTENT_TYPE_SYNTHETIC_MEDIA"],
        "automated_detection": "No",
        "automated_decision": "No",
        "application_date": "2023-05-18-07",
    })
}

/// `statement(puid)` with `changes` made (a null value removes the field).
fn with(puid: &str, changes: Value) -> Value {
    let mut statement = statement(puid);
    for (field, value) in changes.as_object().unwrap() {
        let fields = statement.as_object_mut().unwrap();
        if value.is_null() {
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

#[tokio::test]
async fn a_valid_statement_is_stored_and_given_back_with_its_uuid() {
    let dsa = DsaStandIn::start().await;
    let (status, body) = send(&dsa, vec![statement("TK421")]).await;
    assert_eq!(status, 201, "{body}");
    let given = &body["statements"][0];
    assert_eq!(given["puid"], "TK421");
    assert_eq!(given["category"], "STATEMENT_CATEGORY_FRAUD");
    assert!(
        given["uuid"].as_str().is_some_and(|u| u.len() == 36),
        "{given}"
    );
    assert_eq!(dsa.accepted_puids(), ["TK421"]);
    assert_eq!(dsa.accepted(), std::slice::from_ref(given));
    assert_eq!(dsa.requests(), 1);
    assert!(dsa.rejections().is_empty());
}

#[tokio::test]
async fn every_key_of_the_enumerations_is_accepted() {
    let dsa = DsaStandIn::start().await;
    let mut batch = Vec::new();
    for (i, category) in CATEGORIES.iter().enumerate() {
        batch.push(with(
            &format!("category-{i}"),
            json!({ "category": category }),
        ));
    }
    for (i, source) in SOURCE_TYPES.iter().enumerate() {
        batch.push(with(
            &format!("source-{i}"),
            json!({ "source_type": source }),
        ));
    }
    for (i, answer) in YES_NO.iter().enumerate() {
        batch.push(with(
            &format!("automated-{i}"),
            json!({ "automated_detection": answer, "automated_decision": answer }),
        ));
    }
    let every_type = json!({ "content_type": CONTENT_TYPES, "content_type_other": "a poll" });
    batch.push(with("every-type", every_type));
    let (status, body) = send(&dsa, batch).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        dsa.accepted().len(),
        CATEGORIES.len() + SOURCE_TYPES.len() + YES_NO.len() + 1
    );
}

#[tokio::test]
async fn values_in_place_of_keys_and_unknown_keys_are_refused() {
    let dsa = DsaStandIn::start().await;
    let errors = refused(
        &dsa,
        with("a", json!({ "category": "STATEMENT_CATEGORY_SPAM" })),
    )
    .await;
    assert_eq!(
        errors,
        json!({ "category": ["The selected category is invalid."] })
    );
    // The model's value, not its key.
    let errors = refused(
        &dsa,
        with("a", json!({ "decision_ground": "Illegal Content" })),
    )
    .await;
    assert_eq!(
        errors["decision_ground"],
        json!(["The selected decision ground is invalid."])
    );
    let errors = refused(
        &dsa,
        with("a", json!({ "territorial_scope": ["XY", "ZZ"] })),
    )
    .await;
    assert_eq!(
        errors["territorial_scope"],
        json!(["The selected territorial scope is invalid."])
    );
    // A list where the rules take one key.
    let visibility = json!({ "decision_visibility": ["DECISION_VISIBILITY_CONTENT_DISABLED"] });
    let errors = refused(&dsa, with("a", visibility)).await;
    assert_eq!(
        errors["decision_visibility"],
        json!(["The selected decision visibility is invalid."])
    );
    let errors = refused(
        &dsa,
        with("a", json!({ "content_type": "CONTENT_TYPE_TEXT" })),
    )
    .await;
    assert_eq!(
        errors["content_type"],
        json!(["The content type must be an array."])
    );
}

#[tokio::test]
async fn the_ground_specific_fields_are_required_for_their_ground_and_dropped_for_the_other() {
    let dsa = DsaStandIn::start().await;
    let errors = refused(
        &dsa,
        with("a", json!({ "illegal_content_legal_ground": null })),
    )
    .await;
    assert_eq!(
        errors,
        json!({ "illegal_content_legal_ground": [
            "The illegal content legal ground field is required when decision ground is illegal content."
        ] })
    );
    // A field of the other ground is checked by the rules before its exclusion: a null
    // "incompatible_content_illegal" refuses an illegal-content statement.
    let null_illegal = json!({ "incompatible_content_illegal": null });
    let mut illegal = statement("a");
    illegal
        .as_object_mut()
        .unwrap()
        .extend(null_illegal.as_object().unwrap().clone());
    let errors = refused(&dsa, illegal).await;
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

    // The illegal-content fields of an incompatible-content statement are not stored.
    let mut complete = incompatible;
    complete["incompatible_content_explanation"] = json!("foobar2");
    complete["incompatible_content_illegal"] = json!("No");
    let (status, body) = send(&dsa, vec![with("b", complete)]).await;
    assert_eq!(status, 201, "{body}");
    let stored = &dsa.accepted()[0];
    assert!(
        stored.get("illegal_content_legal_ground").is_none(),
        "{stored}"
    );
    assert!(
        stored.get("illegal_content_explanation").is_none(),
        "{stored}"
    );
    assert_eq!(stored["incompatible_content_illegal"], "No");
}

#[tokio::test]
async fn dates_are_to_the_hour_after_2020_and_an_end_is_not_before_the_application() {
    let dsa = DsaStandIn::start().await;
    for bad in [
        "2023-4-4-4",
        "2023-05-18",
        "2023-05-18 07:00:00",
        "2023-02-30-01",
        "2023-05-18-24",
    ] {
        let errors = refused(&dsa, with("a", json!({ "application_date": bad }))).await;
        assert_eq!(
            errors,
            json!({ "application_date": ["The application date does not match the format Y-m-d-H."] }),
            "{bad}"
        );
    }
    // Read leniently for the comparison, a date in no format is not after 2020 either.
    let errors = refused(
        &dsa,
        with("a", json!({ "application_date": "yesterday-ish" })),
    )
    .await;
    assert_eq!(
        errors,
        json!({ "application_date": [
            "The application date does not match the format Y-m-d-H.",
            "The application date must be a date after 2020-01-01.",
        ] })
    );
    let errors = refused(
        &dsa,
        with("a", json!({ "application_date": "2020-01-01-00" })),
    )
    .await;
    assert_eq!(
        errors["application_date"],
        json!(["The application date must be a date after 2020-01-01."])
    );
    let early_end = json!({ "application_date": "2023-12-20-05", "end_date": "2023-12-20-04" });
    let errors = refused(&dsa, with("a", early_end)).await;
    assert_eq!(
        errors,
        json!({ "end_date": ["The end date must be a date after or equal to application date."] })
    );

    let end = json!({ "application_date": "2020-01-01-01", "end_date": "2020-01-01-01" });
    let (status, body) = send(&dsa, vec![with("b", end)]).await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn texts_have_their_maximum_length() {
    let dsa = DsaStandIn::start().await;
    let errors = refused(
        &dsa,
        with("a", json!({ "decision_facts": "x".repeat(5001) })),
    )
    .await;
    assert_eq!(
        errors,
        json!({ "decision_facts": ["The decision facts must not be greater than 5000 characters."] })
    );
    let errors = refused(&dsa, with("a", json!({ "url": "é".repeat(501) }))).await;
    assert_eq!(
        errors["url"],
        json!(["The url must not be greater than 500 characters."])
    );

    // Characters are counted, not bytes; and a blank required field is a missing one.
    let longest = json!({ "decision_facts": "é".repeat(5000), "url": "not empty" });
    let (status, body) = send(&dsa, vec![with("b", longest)]).await;
    assert_eq!(status, 201, "{body}");
    let errors = refused(&dsa, with("c", json!({ "url": "  " }))).await;
    assert_eq!(errors, json!({ "url": ["The url field is required."] }));
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
    let account =
        json!({ "decision_visibility": null, "decision_account": "DECISION_ACCOUNT_SUSPENDED" });
    let (status, body) = send(&dsa, vec![with("b", account)]).await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn an_other_content_type_needs_its_description_which_is_dropped_otherwise() {
    let dsa = DsaStandIn::start().await;
    let other = json!({ "content_type": ["CONTENT_TYPE_APP", "CONTENT_TYPE_OTHER"] });
    let errors = refused(&dsa, with("a", other)).await;
    assert_eq!(
        errors,
        json!({ "content_type_other": ["The content type other field is required."] })
    );

    let described =
        json!({ "content_type": ["CONTENT_TYPE_OTHER"], "content_type_other": "a poll" });
    let undescribed =
        json!({ "content_type": ["CONTENT_TYPE_VIDEO"], "content_type_other": "a poll" });
    let (status, body) = send(&dsa, vec![with("b", described), with("c", undescribed)]).await;
    assert_eq!(status, 201, "{body}");
    let stored = dsa.accepted();
    assert_eq!(stored[0]["content_type_other"], "a poll");
    assert!(
        stored[1].get("content_type_other").is_none(),
        "{}",
        stored[1]
    );
}

#[tokio::test]
async fn a_puid_is_required_and_made_of_letters_digits_dashes_and_underscores() {
    let dsa = DsaStandIn::start().await;
    let errors = refused(&dsa, with("", json!({}))).await;
    assert_eq!(errors, json!({ "puid": ["The puid field is required."] }));
    let errors = refused(&dsa, statement("very bad + â pu+id !")).await;
    assert_eq!(errors, json!({ "puid": ["The puid format is invalid."] }));
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
        with("d", json!({ "source_type": null })),
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
    let message = "The statements must have between 1 and 100 items.";
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
