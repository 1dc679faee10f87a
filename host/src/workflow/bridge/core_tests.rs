//! The pure core on [`WitType`]s built by hand: the kinds a WAT test component
//! cannot declare (`map`), and the fuzzer's findings (fuzz target
//! `rhai_bridge`), each a round trip that failed.

use rhai::{Dynamic, Engine as Rhai};

use super::*;

fn eval(script: &str) -> Dynamic {
    Rhai::new().eval::<Dynamic>(script).expect("the test expression evaluates")
}

fn map_of(key: WitType, value: WitType) -> WitType {
    WitType::Map(Box::new(key), Box::new(value))
}

/// Converts, converts back with the type, and converts again: the same value.
fn round_trip(script: &str, ty: &WitType) -> (WitValue, Dynamic) {
    let first = to_value(&eval(script), ty, "m").expect("the value converts");
    let back = from_value(&first, Some(ty), "m").expect("and back");
    assert_eq!(to_value(&back, ty, "m").expect("the bridge's own output is accepted"), first, "{back:?}");
    (first, back)
}

#[test]
fn an_empty_map_with_non_string_keys_round_trips() {
    // Found by rhai_bridge: `[]` became `#{}`, which a `map<u32, _>` refused.
    let ty = map_of(WitType::U32, WitType::String);
    let (value, back) = round_trip("[]", &ty);
    assert_eq!(value, WitValue::Map(Vec::new()));
    assert!(back.is_array(), "{back:?}");
    assert_eq!(to_value(&eval("#{}"), &ty, "m"), Ok(WitValue::Map(Vec::new())));
    assert!(to_value(&eval("#{a: \"x\"}"), &ty, "m").is_err(), "a non-empty object map needs string keys");
}

#[test]
fn a_key_given_twice_in_pair_form_is_refused() {
    // Found by rhai_bridge: both pairs went to the plugin, one came back.
    let ty = map_of(WitType::String, WitType::U32);
    let err = to_value(&eval(r#"[["a", 1], ["a", 2]]"#), &ty, "m").expect_err("a duplicate key");
    assert_eq!(err.to_string(), r#"m[1][0]: duplicate key string "a""#);
    let (_, back) = round_trip(r#"[["a", 1], ["b", 2]]"#, &ty);
    assert!(back.is_map());
    let err = to_value(&eval("[[1, 1], [1, 2]]"), &map_of(WitType::U32, WitType::U32), "m").expect_err("duplicate");
    assert_eq!(err.to_string(), "m[1][0]: duplicate key i64 1");
}

#[test]
fn map_values_come_back_with_their_type() {
    let ty = map_of(WitType::String, WitType::List(Box::new(WitType::U8)));
    let (_, back) = round_trip("#{a: blob(2, 7), b: []}", &ty);
    let map = back.as_map_ref().expect("a map");
    assert!(map["a"].is_blob() && map["b"].is_blob(), "{back:?}");
}

#[test]
fn string_keys_given_as_pairs_are_in_key_order_like_an_object_map() {
    // Found by rhai_bridge (artifact crash-e3f8861c): pairs kept the script's
    // order, the object map they came back as was sorted.
    let ty = map_of(WitType::String, WitType::U32);
    let (value, _) = round_trip(r#"[["namea", 1], ["a", 2]]"#, &ty);
    let object = to_value(&eval("#{namea: 1, a: 2}"), &ty, "m").expect("an object map");
    assert_eq!(value, object);
    let WitValue::Map(pairs) = value else { panic!("a map") };
    assert_eq!(pairs[0], (WitValue::String("a".into()), WitValue::U32(2)));
}
