//! Property tests of numbered names: every number round-trips, and the parser accepts exactly
//! the names the formatter produces (no two names for one number, no stray file taken for ours).

use prefixkv_storage::NumberedName;
use proptest::prelude::*;

const FAMILIES: [NumberedName; 3] = [
    NumberedName::new("", 20, ".oplog"),
    NumberedName::new("v", 20, ""),
    NumberedName::new("segment-", 6, ".seg"),
];

proptest! {
    #[test]
    fn numbers_round_trip(n in any::<u64>(), family in 0usize..3) {
        let names = FAMILIES[family];
        prop_assert_eq!(names.parse(&names.format(n)), Some(n));
    }

    #[test]
    fn parse_accepts_only_canonical_names(text in "[a-z.v-]{0,9}[0-9]{0,22}[.a-z]{0,7}", family in 0usize..3) {
        let names = FAMILIES[family];
        if let Some(n) = names.parse(&text) {
            prop_assert_eq!(names.format(n), text);
        }
    }
}
