//! Statements written in the Transparency Database's 2023 schema (by quiesce before it wrote
//! the schema in force of 2025-07-01), in the schema in force: what the database is sent for
//! one still to deliver. The stored statement is what the platform was told at the time and is
//! left as it is; the conversion happens at delivery (`actions/dsa.rs`), so a statement an
//! older process writes during a rolling deploy is converted too.

use serde_json::{Map, Value};

use super::dsa_schema::category_for_2023;

/// The 2023 schema's `Y-m-d-H` (or any `Y-m-d...`) as the schema in force's `Y-m-d`.
fn day_of(value: &Value) -> Option<String> {
    let text = value.as_str()?;
    let day = text.get(..10)?;
    let bytes = day.as_bytes();
    let shaped = bytes.len() == 10
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes
            .iter()
            .enumerate()
            .all(|(i, b)| i == 4 || i == 7 || b.is_ascii_digit());
    shaped.then(|| day.to_owned())
}

/// Puts `statement` in the schema in force if it is in the 2023 one (a statement in the schema
/// in force is left as it is): `decision_visibility` a list (a restricting label, written as
/// "other" then, labelled content), dates as days, `automated_decision` one of the three
/// values (by `decided_by`: a rule's fully automated, a review decision partially, any other
/// moderator's not), the category in force for a 2023 one, `end_date` in the field of what the
/// decision restricts, no `url`, and a `content_date`: `content_since` (the entity's first
/// event's day), else the application's. Returns whether it changed anything.
pub fn upgrade_2023(
    statement: &mut Map<String, Value>,
    decided_by: &str,
    content_since: Option<&str>,
) -> bool {
    let mut changed = false;
    if let Some(Value::String(visibility)) = statement.get("decision_visibility").cloned() {
        let other = statement
            .get("decision_visibility_other")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let visibility =
            if visibility == "DECISION_VISIBILITY_OTHER" && other.starts_with("Content labelled") {
                statement.remove("decision_visibility_other");
                "DECISION_VISIBILITY_CONTENT_LABELLED".to_owned()
            } else {
                visibility
            };
        statement.insert("decision_visibility".into(), Value::from(vec![visibility]));
        changed = true;
    }
    if let Some(application) = statement.get("application_date").and_then(day_of)
        && statement["application_date"] != application.as_str()
    {
        statement.insert("application_date".into(), application.into());
        changed = true;
    }
    if let Some(end) = statement.remove("end_date") {
        changed = true;
        let field = if statement.contains_key("decision_account") {
            "end_date_account_restriction"
        } else if statement.contains_key("decision_provision") {
            "end_date_service_restriction"
        } else {
            "end_date_visibility_restriction"
        };
        if let Some(end) = day_of(&end) {
            statement.insert(field.into(), end.into());
        }
    }
    changed |= statement.remove("url").is_some();
    let automated = match statement.get("automated_decision").and_then(Value::as_str) {
        Some("Yes") => Some("AUTOMATED_DECISION_FULLY"),
        Some("No") if decided_by == "review" => Some("AUTOMATED_DECISION_PARTIALLY"),
        Some("No") => Some("AUTOMATED_DECISION_NOT_AUTOMATED"),
        _ => None,
    };
    if let Some(automated) = automated {
        statement.insert("automated_decision".into(), automated.into());
        changed = true;
    }
    if let Some(category) = statement
        .get("category")
        .and_then(Value::as_str)
        .and_then(category_for_2023)
    {
        statement.insert("category".into(), category.into());
        changed = true;
    }
    if changed && !statement.contains_key("content_date") {
        let since = content_since
            .and_then(|since| day_of(&Value::from(since)))
            .or_else(|| statement.get("application_date").and_then(day_of));
        if let Some(since) = since {
            statement.insert("content_date".into(), since.into());
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A statement exactly as quiesce wrote it before it wrote the schema in force.
    fn written_in_2023() -> Map<String, Value> {
        json!({
            "decision_visibility": "DECISION_VISIBILITY_CONTENT_DISABLED",
            "decision_ground": "DECISION_GROUND_INCOMPATIBLE_CONTENT",
            "incompatible_content_ground": "The platform's terms of service",
            "incompatible_content_explanation": "5 reports",
            "incompatible_content_illegal": "No",
            "content_type": ["CONTENT_TYPE_OTHER"],
            "content_type_other": "post",
            "category": "STATEMENT_CATEGORY_VIOLATION_TOS",
            "application_date": "2026-12-06-09",
            "end_date": "2026-12-07-09",
            "decision_facts": "Rule remove_reported decided automatically.",
            "source_type": "SOURCE_ARTICLE_16",
            "automated_detection": "Yes",
            "automated_decision": "Yes",
            "url": "post:1",
            "puid": "quiesce-1",
        })
        .as_object()
        .unwrap()
        .clone()
    }

    #[test]
    fn a_2023_statement_is_put_in_the_schema_in_force() {
        let mut statement = written_in_2023();
        assert!(upgrade_2023(
            &mut statement,
            "automated",
            Some("2026-11-30")
        ));
        let upgraded = Value::Object(statement.clone());
        assert_eq!(
            upgraded["decision_visibility"],
            json!(["DECISION_VISIBILITY_CONTENT_DISABLED"])
        );
        assert_eq!(upgraded["application_date"], "2026-12-06");
        assert_eq!(upgraded["end_date_visibility_restriction"], "2026-12-07");
        assert_eq!(upgraded["automated_decision"], "AUTOMATED_DECISION_FULLY");
        assert_eq!(
            upgraded["category"],
            "STATEMENT_CATEGORY_OTHER_VIOLATION_TC"
        );
        assert_eq!(upgraded["content_date"], "2026-11-30");
        assert!(upgraded.get("url").is_none() && upgraded.get("end_date").is_none());
        // Once is enough: a statement in the schema in force is left alone.
        assert!(!upgrade_2023(&mut statement, "automated", None));
        assert_eq!(Value::Object(statement), upgraded);
    }

    #[test]
    fn a_moderators_suspension_and_a_label_take_their_own_fields() {
        let mut suspension = written_in_2023();
        suspension.remove("decision_visibility");
        suspension.insert(
            "decision_account".into(),
            "DECISION_ACCOUNT_SUSPENDED".into(),
        );
        suspension.insert("automated_decision".into(), "No".into());
        upgrade_2023(&mut suspension, "review", None);
        assert_eq!(suspension["end_date_account_restriction"], "2026-12-07");
        assert_eq!(
            suspension["automated_decision"],
            "AUTOMATED_DECISION_PARTIALLY"
        );
        // Without the entity's first event, the day of the decision.
        assert_eq!(suspension["content_date"], "2026-12-06");

        let mut label = written_in_2023();
        label.insert(
            "decision_visibility".into(),
            "DECISION_VISIBILITY_OTHER".into(),
        );
        label.insert(
            "decision_visibility_other".into(),
            "Content labelled \"graphic\"".into(),
        );
        label.insert("automated_decision".into(), "No".into());
        upgrade_2023(&mut label, "override", None);
        assert_eq!(
            label["decision_visibility"],
            json!(["DECISION_VISIBILITY_CONTENT_LABELLED"])
        );
        assert!(!label.contains_key("decision_visibility_other"));
        assert_eq!(
            label["automated_decision"],
            "AUTOMATED_DECISION_NOT_AUTOMATED"
        );
    }
}
