//! Arbitrary bytes as OPT RDATA into `lagran::dns::ecs::find_in_opt`: never a
//! panic; an ECS option it accepts is echoed with the same FAMILY, SOURCE and
//! ADDRESS (RFC 7871 §7.2.1), re-parses to itself, and its scope is bounded by
//! the family.
#![no_main]

use lagran::dns::ecs::{Ecs, find_in_opt};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Ecs::parse(data);
    let Ok(Some(ecs)) = find_in_opt(data) else { return };
    assert!(ecs.source() <= ecs.max_prefix());
    for scope in [0, ecs.source(), ecs.max_prefix()] {
        let mut out = Vec::new();
        ecs.write_option(scope, &mut out);
        assert_eq!(out.len(), ecs.wire_len());
        // The echo carries the scope; as a query option it would be refused
        // for a non-zero scope, so re-parse it with the scope cleared.
        out[7] = 0;
        let again = find_in_opt(&out).expect("our echo parses").expect("our echo is an ECS option");
        assert_eq!((again.family(), again.source(), again.address()), (ecs.family(), ecs.source(), ecs.address()));
    }
});
