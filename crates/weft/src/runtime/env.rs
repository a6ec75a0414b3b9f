//! Configuration from the environment: `WEFT_WORKERS`, `WEFT_INTERACTIVE`, `WEFT_STATS`,
//! `WEFT_VERBOSE`, `WEFT_DEBUG_STALL`, `WEFT_DEBUG_SYSMON`, `WEFT_MAX_EXTRA_WORKERS`,
//! `WEFT_DEBUG_DEADLOCK` (and `WEFT_STACK_SIZE`, read by `fiber::stack`;
//! `WEFT_DEBUG_LOCKS`, read by `waitlist::depth`). The README has the table of them all.
//! A malformed value is reported on stderr and ignored (a malformed flag reads as off).

/// The most workers one runtime may have.
pub(crate) const MAX_WORKERS: usize = 4096;

/// A positive count from `var`, or `None` (unset, or malformed and reported).
pub(crate) fn count(var: &str) -> Option<usize> {
    let raw = crate::base::env_var(var)?;
    match parse_count(&raw) {
        Ok(n) => Some(n),
        Err(why) => {
            eprintln!("weft: ignoring {var}={raw:?}: {why}");
            None
        }
    }
}

/// A count from `var` where zero is allowed (`None` if unset or malformed).
pub(crate) fn count_or_zero(var: &str) -> Option<usize> {
    let raw = crate::base::env_var(var)?;
    // The number, not the text: `00` and `+0` are zero too.
    if raw.trim().parse::<usize>() == Ok(0) {
        return Some(0);
    }
    count(var)
}

fn parse_count(raw: &str) -> Result<usize, String> {
    match raw.trim().parse::<usize>() {
        Ok(0) => Err("it must be at least 1".into()),
        Ok(n) if n > MAX_WORKERS => Err(format!("it must be at most {}", MAX_WORKERS)),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a positive whole number".into()),
    }
}

/// A boolean flag that is `default` while unset or empty, and otherwise read as by
/// [`flag`]: any value other than a true one (a malformed one too, which is reported)
/// turns it off.
pub(crate) fn flag_default(var: &str, default: bool) -> bool {
    match std::env::var(var) {
        Ok(raw) if raw.trim().is_empty() => default,
        Ok(_) | Err(std::env::VarError::NotUnicode(_)) => flag(var),
        Err(std::env::VarError::NotPresent) => default,
    }
}

/// A boolean flag: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`; anything else is
/// reported and treated as unset.
pub(crate) fn flag(var: &str) -> bool {
    let Some(raw) = crate::base::env_var(var) else {
        return false;
    };
    match raw.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => true,
        "" | "0" | "false" | "no" | "off" => false,
        _ => {
            eprintln!("weft: ignoring {var}={raw:?}: expected 1 or 0");
            false
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::parse_count;

    #[test]
    fn counts() {
        assert_eq!(parse_count("4"), Ok(4));
        assert_eq!(parse_count(" 2 "), Ok(2));
        assert!(parse_count("0").is_err());
        assert!(parse_count("abc").is_err());
        assert!(parse_count("-1").is_err());
        assert!(parse_count("100000").is_err());
    }
}
