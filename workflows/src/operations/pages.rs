//! Pages of the lists that grow without an order of time: credentials, clusters and hosted APIs
//! (by name) and a run's timeline (by position). An answer holds at most [`PAGE_LIMIT`] of them
//! (that many unless asked for fewer); the next page starts after the last name (or position) of
//! the one before, which is what the CLI asks until a page comes short.

use crate::refusal::{Code, Refusal};

/// Most entries one page answers with, and how many when not asked.
pub const PAGE_LIMIT: u32 = 1000;

/// The page size asked for, checked: 1 to [`PAGE_LIMIT`], [`PAGE_LIMIT`] if not asked.
pub(super) fn page_limit(asked: Option<u32>) -> Result<u32, Refusal> {
    let limit = asked.unwrap_or(PAGE_LIMIT);
    if (1..=PAGE_LIMIT).contains(&limit) {
        Ok(limit)
    } else {
        Err(Refusal::new(Code::InvalidLimit, format!("limit {limit} is out of range: use 1 to {PAGE_LIMIT}")))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_page_is_1_to_1000_and_1000_by_default() {
        assert_eq!(super::page_limit(None).unwrap(), 1000);
        assert_eq!(super::page_limit(Some(1)).unwrap(), 1);
        for refused in [0, 1001, u32::MAX] {
            let refusal = super::page_limit(Some(refused)).unwrap_err();
            assert_eq!(refusal.code.as_str(), "INVALID_LIMIT");
            assert!(refusal.message.contains("use 1 to 1000"), "{}", refusal.message);
        }
    }
}
