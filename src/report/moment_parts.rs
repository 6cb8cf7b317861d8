//! The names a steady step's peak moment's parts are shown by (the timeline's caption, `diff`).
//! A Record's `peak_moments[].by_phase.temporaries` is the phase's peak beyond what was live at
//! its end: everything freed before the phase ended, a backward's activations among them. The
//! breakdown's "temporaries at the peak" is another figure (the peak beyond every category
//! alive in its phase), so the moment's part is not called temporaries where both are shown.

/// What the moment's `temporaries` are shown as.
pub const FREED: &str = "freed before the phase ended";

/// The part's name as shown: `freed before the phase ended` for the moment's `temporaries`,
/// the Record's key for the others.
pub fn part_name(key: &str) -> String {
    match key {
        "temporaries" => FREED.into(),
        other => other.into(),
    }
}

/// One sentence on why the moment's freed bytes and the breakdown's temporaries differ.
pub const WHY_TWO_FIGURES: &str = "\"freed before the phase ended\" is the phase's peak beyond what was live at its end (a backward frees activations as it runs, so they count there); \"temporaries at the peak\" in the breakdown is the peak beyond every category alive in its phase: two figures of one peak, not one figure twice.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_moments_temporaries_are_named_for_what_they_measure() {
        assert_eq!(part_name("temporaries"), "freed before the phase ended");
        assert_eq!(part_name("gradients"), "gradients");
    }
}
