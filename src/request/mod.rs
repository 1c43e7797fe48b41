//! What both edges read a request with, so that the API (`http/`) and the console
//! (`console/`) read it one way: the field readers that give the API's words (`fields`), what
//! is wrong with a body, a form or a query that reads but is not the request (`problem`), a
//! form or a query string as pairs, each field once (`form`), the values a route's path
//! carries (`path`), and the one place that decides whether the caller may see what a route
//! addresses (`scope`). Each edge answers a refusal its own way: the API's JSON error, the
//! console's page.

pub mod fields;
pub mod form;
pub mod path;
pub mod problem;
pub mod scope;
