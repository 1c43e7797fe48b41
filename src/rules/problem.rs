//! What is wrong with a rules file, typed: the file as a whole (`RulesError`), or one rule of it
//! (`RuleProblem`): each check at load says what it found, and only the message (as the API
//! and the CLI show it) joins it into words.

use cel::ParseErrors;

use super::StatementError;
use super::{
    check::UnknownName,
    condition::{ConditionError, ExemptionError},
    decay::HalfLifeError,
    declared::AttributeReadError,
};
use crate::domain::{Invalid, InvalidDeclaration};

/// Which of a rule's conditions: `when`, or its exemption `unless`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clause {
    When,
    Unless,
}

impl std::fmt::Display for Clause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Clause::When => "`when`",
            Clause::Unless => "`unless`",
        })
    }
}

/// Why a rule's labels were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("at most {max} labels")]
    TooMany { max: usize },
    #[error("label {0:?} must be 1-64 characters of a-z, 0-9, _, - and .")]
    Invalid(String),
    #[error("label {0:?} appears twice")]
    Twice(String),
}

/// Why one rule was refused at load.
#[derive(Debug, thiserror::Error)]
pub enum RuleProblem {
    #[error("rule names must be present and unique")]
    Name,
    /// `with_condition` names a rule the set does not have.
    #[error("there is no rule of that name")]
    NoSuchRule,
    #[error("{0} does not parse: {1}")]
    Unparsed(Clause, ParseErrors),
    #[error("{0}: {1}")]
    UnknownName(Clause, UnknownName),
    #[error("{0}: {1}")]
    AttributeRead(Clause, AttributeReadError),
    #[error("{0}: {1}")]
    HalfLife(Clause, HalfLifeError),
    #[error("`duration`: {0}")]
    Duration(Invalid),
    #[error("a rule needs an action or labels (or both)")]
    NoEffect,
    #[error("`labels`: {0}")]
    Labels(LabelError),
    #[error("`rollout` must be a share above 0 and at most 1")]
    Rollout,
    #[error(transparent)]
    Statement(super::StatementError),
    /// The dry run on an empty snapshot could not build its context.
    #[error(transparent)]
    Context(ConditionError),
    /// The dry run on an empty snapshot: the condition failed.
    #[error("`when` cannot be evaluated: {0}")]
    WhenFails(ConditionError),
    /// The dry run on an empty snapshot: the exemption failed.
    #[error("cannot be evaluated: {0}")]
    ExemptionFails(ExemptionError),
}

/// Why a rules file was refused.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    // The io error is in the message and deliberately not a `source`: a cause chain would
    // print it twice ("No such file or directory (os error 2): No such file ...").
    #[error("cannot read rules file {path}: {error}")]
    Read { path: String, error: std::io::Error },
    /// The file is not TOML of the rules' shape (the parser's message), or holds a NUL.
    #[error("invalid rules file: {0}")]
    Parse(String),
    #[error("invalid rules file: [attributes]: {0}")]
    Declarations(InvalidDeclaration),
    #[error("invalid rules file: [statement]: {0}")]
    Statement(StatementError),
    /// Boxed: a problem carries what it found, and errors travel by value.
    #[error("rule {rule:?}: {problem}")]
    Rule {
        rule: String,
        problem: Box<RuleProblem>,
    },
}
