//! Canary rules (`rollout = 0.1`): a rule live for a stable, hash-chosen share of entities and
//! a shadow rule for the rest. The share an entity falls in is a hash of the rule's name and
//! the entity's id, so it is the same in every process and every rules version, and raising the
//! rollout keeps every entity that was already in it.

use sha2::{Digest, Sha256};

use super::Rule;
use crate::domain::EntityId;

/// Where `entity` falls in [0, 1) for rule `rule`: the first 8 bytes of SHA-256 of both.
pub fn position(rule: &str, entity: &EntityId) -> f64 {
    let digest = Sha256::digest(format!("rollout\n{rule}\n{entity}"));
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) >> 11) as f64 / (1u64 << 53) as f64
}

impl Rule {
    /// Whether the rule is live for `entity`: always, without a rollout; for a canary, when
    /// the entity falls in its share.
    pub fn live_for(&self, entity: &EntityId) -> bool {
        self.rollout
            .is_none_or(|share| position(&self.name, entity) < share)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::RuleSet;

    fn canary(share: f64, extra: &str) -> RuleSet {
        RuleSet::from_toml(&format!(
            "[[rule]]\nname = \"trial\"\nwhen = 'count(\"flag\") >= 1'\naction = \"flag\"\nreason = \"x\"\nrollout = {share}\n{extra}"
        ))
        .unwrap()
    }

    #[test]
    fn the_live_share_is_within_statistical_bounds_of_the_rollout() {
        let rules = canary(0.1, "");
        let rule = &rules.rules()[0];
        let n = 20_000;
        let live = (0..n)
            .filter(|i| rule.live_for(&EntityId::parse(&format!("post:{i}")).unwrap()))
            .count() as f64;
        // 4 standard deviations of a binomial(20,000, 0.1): 0.1 +- 0.0085.
        let share = live / n as f64;
        let sigma = (0.1_f64 * 0.9 / n as f64).sqrt();
        assert!((share - 0.1).abs() < 4.0 * sigma, "{share}");
    }

    #[test]
    fn an_entity_keeps_its_group_across_versions_and_a_wider_rollout_keeps_it() {
        let first = canary(0.1, "");
        let later = canary(
            0.1,
            "\n[[rule]]\nname = \"other\"\nwhen = 'count(\"report\") >= 9'\naction = \"hide\"\nreason = \"y\"\n",
        );
        let wider = canary(0.3, "");
        for i in 0..2_000 {
            let entity = EntityId::parse(&format!("post:{i}")).unwrap();
            let live = first.rules()[0].live_for(&entity);
            assert_eq!(live, later.rules()[0].live_for(&entity), "{entity}");
            if live {
                assert!(wider.rules()[0].live_for(&entity), "{entity}");
            }
        }
    }

    #[test]
    fn out_of_its_share_a_canary_rule_is_a_shadow_rule_and_a_bad_rollout_is_refused() {
        let rules = canary(0.5, "");
        let (mut live, mut shadow) = (0, 0);
        for i in 0..200 {
            let snapshot = crate::domain::Snapshot::with_counts(
                EntityId::parse(&format!("post:{i}")).unwrap(),
                [("flag", 1)],
            );
            let verdict = rules.evaluate(&snapshot);
            let in_share = rules.rules()[0].live_for(&snapshot.entity);
            assert_eq!(verdict.matched.len(), usize::from(in_share));
            assert_eq!(verdict.shadow.len(), usize::from(!in_share));
            live += verdict.matched.len();
            shadow += verdict.shadow.len();
        }
        assert!(live > 50 && shadow > 50, "{live} {shadow}");
        for bad in ["0", "1.5", "-0.1"] {
            let error = RuleSet::from_toml(&format!(
                "[[rule]]\nname = \"trial\"\nwhen = 'true'\naction = \"flag\"\nreason = \"x\"\nrollout = {bad}\n"
            ))
            .err()
            .unwrap()
            .to_string();
            assert!(
                error.contains("trial") && error.contains("rollout"),
                "{error}"
            );
        }
        // The rollout survives the round trip through a rules file (backtests, promotion).
        let again = RuleSet::from_toml(&rules.to_toml()).unwrap();
        assert_eq!(again.rules()[0].rollout, Some(0.5));
    }
}
