use super::*;

fn found(values: &[&str], hay: &str) -> Vec<String> {
    let k = KnownIds::new(values.iter().copied());
    let mut out = Vec::new();
    k.for_each(hay.as_bytes(), |r, _| out.push(hay[r].to_owned()));
    out
}

#[test]
fn glued_encoded_and_bounded() {
    let v = ["pat-000123", "482913", "slot-im-1"];
    assert_eq!(found(&v, "Arztbrief_pat-000123_2025.pdf"), ["pat-000123"]);
    assert_eq!(found(&v, "\"pat-000123-v7\""), ["pat-000123"]);
    assert_eq!(found(&v, "?subject=Patient%2Fpat-000123&x"), ["pat-000123"]);
    assert_eq!(
        found(&v, "pat&#45;000123 pat%2D000123"),
        ["pat&#45;000123", "pat%2D000123"]
    );
    assert_eq!(found(&v, "/patients/482913/x 1482913 4829130"), ["482913"]);
    assert_eq!(found(&v, "slot-im-12 xslot-im-1 slot-im-1."), ["slot-im-1"]);
    assert_eq!(found(&["12"], "12 tablets"), Vec::<String>::new());
}

proptest::proptest! {
    /// Leaving out the matches that overlap the ranges to skip (the ids
    /// a scan already found) never leaves a value uncovered: every match
    /// of the plain search overlaps a skipped range or a match found.
    #[test]
    fn skipping_found_ids_leaves_no_match_uncovered(
        values in proptest::collection::vec("([a-c]{1,3}-[0-9]{1,3}(-[a-c])?|[0-9]{5,6}|[a-c]{2}_[0-9]{2})", 1..6),
        pieces in proptest::collection::vec(0usize..24, 0..30),
        keep in proptest::collection::vec(proptest::bool::ANY, 30),
    ) {
        let glue = ["-", " ", "/", "x", "7", "%2D", "_", ".", "&#45;", "&amp;", "%20", "&#x2d;"];
        let hay: String = pieces
            .iter()
            .map(|p| values.get(*p).map_or(glue[p % glue.len()], String::as_str))
            .collect();
        let k = KnownIds::new(values.iter().map(String::as_str));
        let mut plain = Vec::new();
        k.for_each(hay.as_bytes(), |r, v| plain.push((r, v)));
        let skip: Vec<(Range<usize>, usize)> = plain
            .iter()
            .zip(keep.iter().cycle())
            .filter(|(_, keep)| **keep)
            .map(|(m, _)| m.clone())
            .collect();
        let mut outside = Vec::new();
        k.for_each_outside(hay.as_bytes(), &skip, |r, _| outside.push(r));
        for r in &outside {
            let text = hay.get(r.clone()).unwrap_or_default().to_ascii_lowercase();
            let decoded = decoded_view(text.as_bytes()).unwrap_or(text);
            proptest::prop_assert!(values.contains(&decoded), "{r:?} in {hay}");
        }
        let covered = |r: &Range<usize>| {
            skip.iter().map(|(s, _)| s).chain(&outside).any(|c| c.start < r.end && r.start < c.end)
        };
        for (r, _) in &plain {
            proptest::prop_assert!(covered(r), "{r:?} uncovered in {hay}");
        }
    }
}

#[test]
fn decodes_escapes() {
    assert_eq!(
        decoded_view(b"Patient%2Fpat-1").as_deref(),
        Some("Patient/pat-1")
    );
    assert_eq!(
        decoded_view(b"pat&#45;1 &amp; &#x2D;").as_deref(),
        Some("pat-1 & -")
    );
    assert_eq!(decoded_view(b"a%252Fb").as_deref(), Some("a/b"));
    assert_eq!(decoded_view(b"plain"), None);
}
