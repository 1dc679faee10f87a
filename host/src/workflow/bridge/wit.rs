//! The bridge's own picture of WIT types and values: [`WitType`] and
//! [`WitValue`], so the conversions ([`super::input`], [`super::output`]) are
//! pure code over them, compiled without wasmtime (the fuzz crate builds them
//! from these files). The wasmtime adapter (`super::wasm`) maps `Type` and
//! `Val` onto them one to one.

/// A WIT type as far as values crossing to scripts need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WitType {
    Bool,
    S8,
    U8,
    S16,
    U16,
    S32,
    U32,
    S64,
    U64,
    Float32,
    Float64,
    Char,
    String,
    /// `list<T>`.
    List(Box<WitType>),
    /// `list<T, N>`.
    FixedLengthList(Box<WitType>, u32),
    /// `map<K, V>`.
    Map(Box<WitType>, Box<WitType>),
    /// The fields in declaration order, with their WIT (kebab) names.
    Record(Vec<(String, WitType)>),
    Tuple(Vec<WitType>),
    /// The cases in declaration order, with their payload types.
    Variant(Vec<(String, Option<WitType>)>),
    /// The case names.
    Enum(Vec<String>),
    /// The flag names.
    Flags(Vec<String>),
    Option(Box<WitType>),
    /// `result<ok, err>`, either side possibly without a payload.
    Result {
        ok: Option<Box<WitType>>,
        err: Option<Box<WitType>>,
    },
    /// A kind that cannot cross the workflow boundary: `resource`, `future`,
    /// `stream` or `error-context`.
    Unsupported(&'static str),
}

/// A WIT value, as wasmtime's `Val` without the handles that cannot cross.
#[derive(Debug, Clone, PartialEq)]
pub enum WitValue {
    Bool(bool),
    S8(i8),
    U8(u8),
    S16(i16),
    U16(u16),
    S32(i32),
    U32(u32),
    S64(i64),
    U64(u64),
    Float32(f32),
    Float64(f64),
    Char(char),
    String(String),
    List(Vec<WitValue>),
    FixedLengthList(Vec<WitValue>),
    /// Fields with their WIT (kebab) names.
    Record(Vec<(String, WitValue)>),
    Tuple(Vec<WitValue>),
    Variant(String, Option<Box<WitValue>>),
    Enum(String),
    Option(Option<Box<WitValue>>),
    Result(Result<Option<Box<WitValue>>, Option<Box<WitValue>>>),
    Flags(Vec<String>),
    Map(Vec<(WitValue, WitValue)>),
    /// A handle (`resource`, `future`, `stream`, `error-context`): only ever
    /// produced from a component value, and refused on the way to a script.
    Unsupported(&'static str),
}

/// A human name for a WIT type, as written in WIT (`list<string>`, `option<u16>`).
pub fn wit_type_name(ty: &WitType) -> String {
    match ty {
        WitType::Bool => "bool".into(),
        WitType::S8 => "s8".into(),
        WitType::U8 => "u8".into(),
        WitType::S16 => "s16".into(),
        WitType::U16 => "u16".into(),
        WitType::S32 => "s32".into(),
        WitType::U32 => "u32".into(),
        WitType::S64 => "s64".into(),
        WitType::U64 => "u64".into(),
        WitType::Float32 => "f32".into(),
        WitType::Float64 => "f64".into(),
        WitType::Char => "char".into(),
        WitType::String => "string".into(),
        WitType::List(t) => format!("list<{}>", wit_type_name(t)),
        WitType::FixedLengthList(t, n) => format!("list<{}, {n}>", wit_type_name(t)),
        WitType::Map(k, v) => format!("map<{}, {}>", wit_type_name(k), wit_type_name(v)),
        WitType::Record(fields) => {
            let names: Vec<String> = fields.iter().map(|(n, _)| super::snake(n)).collect();
            format!("record {{{}}}", names.join(", "))
        }
        WitType::Tuple(types) => {
            let names: Vec<String> = types.iter().map(wit_type_name).collect();
            format!("tuple<{}>", names.join(", "))
        }
        WitType::Variant(cases) => {
            let names: Vec<&str> = cases.iter().map(|(n, _)| n.as_str()).collect();
            format!("variant {{{}}}", names.join(", "))
        }
        WitType::Enum(names) => format!("enum {{{}}}", names.join(", ")),
        WitType::Flags(names) => format!("flags {{{}}}", names.join(", ")),
        WitType::Option(t) => format!("option<{}>", wit_type_name(t)),
        WitType::Result { ok, err } => {
            let ok = ok.as_deref().map_or("_".to_string(), wit_type_name);
            let err = err.as_deref().map_or("_".to_string(), wit_type_name);
            format!("result<{ok}, {err}>")
        }
        WitType::Unsupported(kind) => (*kind).into(),
    }
}
