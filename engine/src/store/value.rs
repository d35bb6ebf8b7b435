//! A value bound to one of the domain's writes ([`Store::write_statement`](super::Store)):
//! owned, so that it can travel to the SQLite writer thread, and typed even when it is NULL, so
//! that PostgreSQL is told the parameter's type as sqlx's own binds tell it.

use rusqlite::ToSql;
use rusqlite::types::ToSqlOutput;

/// One bound value: an integer or a text, either of which may be NULL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// An `INTEGER` (`BIGINT` on PostgreSQL).
    Integer(Option<i64>),
    /// A `TEXT`.
    Text(Option<String>),
}

impl From<i64> for Value {
    fn from(value: i64) -> Self {
        Self::Integer(Some(value))
    }
}

impl From<Option<i64>> for Value {
    fn from(value: Option<i64>) -> Self {
        Self::Integer(value)
    }
}

impl From<&str> for Value {
    fn from(value: &str) -> Self {
        Self::Text(Some(value.to_owned()))
    }
}

impl From<&String> for Value {
    fn from(value: &String) -> Self {
        Self::Text(Some(value.clone()))
    }
}

impl From<String> for Value {
    fn from(value: String) -> Self {
        Self::Text(Some(value))
    }
}

impl From<Option<&str>> for Value {
    fn from(value: Option<&str>) -> Self {
        Self::Text(value.map(str::to_owned))
    }
}

impl From<&Option<String>> for Value {
    fn from(value: &Option<String>) -> Self {
        Self::Text(value.clone())
    }
}

impl ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        match self {
            Self::Integer(value) => value.to_sql(),
            Self::Text(value) => value.to_sql(),
        }
    }
}
