//! Unit tests for the safetensors reader: every file is written into a tempdir by the test.

use super::*;
use std::path::{Path, PathBuf};
use tempfile::TempDir;

/// A safetensors file written for a test (`export::write_safetensors` is the library's writer).
fn write_safetensors(
    path: &Path,
    tensors: &[(&str, WDtype, &[usize], &[u8])],
) -> std::io::Result<()> {
    std::fs::write(path, safetensors_bytes(path, tensors)?)
}

/// `[u64 LE header length][header][data]`, header taken as given (no padding added).
fn raw_file(header: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header);
    out.extend_from_slice(data);
    out
}

fn write_bytes(dir: &TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).expect("write test file");
    path
}

/// Writes `bytes` to a temp file, opens it, and returns the error message, checking it names
/// the file. Also checks that `parse_header` on the same bytes agrees.
fn open_err(bytes: &[u8]) -> String {
    let dir = TempDir::new().unwrap();
    let path = write_bytes(&dir, "model.safetensors", bytes);
    let msg = SafetensorsFile::open(&path)
        .expect_err("file should be rejected")
        .to_string();
    assert!(
        msg.contains(&path.display().to_string()),
        "error does not name the file: {msg}"
    );
    let pure = parse_header(bytes, &path)
        .expect_err("parse_header should reject")
        .to_string();
    assert_eq!(msg, pure);
    msg
}

fn assert_has(msg: &str, parts: &[&str]) {
    for part in parts {
        assert!(msg.contains(part), "expected {part:?} in error: {msg}");
    }
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn entry(dtype: &str, shape: &str, begin: u64, end: u64) -> String {
    format!("{{\"dtype\":\"{dtype}\",\"shape\":{shape},\"data_offsets\":[{begin},{end}]}}")
}

// ---- 1-3: the length prefix -------------------------------------------------------------

#[test]
fn file_shorter_than_8_bytes_is_header_too_small() {
    for len in [0usize, 1, 7] {
        let msg = open_err(&vec![0u8; len]);
        assert_has(&msg, &["header too small", &format!("{len} bytes")]);
    }
}

#[test]
fn huge_header_length_is_header_too_large() {
    for n in [u64::MAX, MAX_HEADER_LEN + 1, 1 << 40] {
        let mut bytes = n.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"{}");
        let msg = open_err(&bytes);
        assert_has(
            &msg,
            &["header too large", &n.to_string(), "at most 100000000"],
        );
    }
}

#[test]
fn header_length_beyond_file_is_invalid_header_length() {
    for n in [3u64, 100, MAX_HEADER_LEN] {
        let mut bytes = n.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"{}");
        let msg = open_err(&bytes);
        assert_has(
            &msg,
            &["invalid header length", &n.to_string(), "only 2 bytes"],
        );
    }
}

// ---- 4: header encoding and framing ---------------------------------------------------------

#[test]
fn non_utf8_header_is_rejected() {
    let msg = open_err(&raw_file(b"{\"a\xff\":1}", b""));
    assert_has(&msg, &["invalid header", "UTF-8", "offset 3"]);
}

#[test]
fn bom_header_is_rejected() {
    let msg = open_err(&raw_file("\u{FEFF}{}".as_bytes(), b""));
    assert_has(&msg, &["byte-order mark"]);
}

#[test]
fn non_object_headers_are_rejected() {
    for header in ["[]", "\"x\"", "5", "null", " {}", "\n{}"] {
        let msg = open_err(&raw_file(header.as_bytes(), b""));
        assert_has(&msg, &["invalid header", "JSON object"]);
    }
    let msg = open_err(&raw_file(b"", b""));
    assert_has(&msg, &["empty header"]);
}

#[test]
fn nul_padding_is_rejected() {
    let msg = open_err(&raw_file(b"{}\0\0\0\0\0\0", b""));
    assert_has(&msg, &["NUL byte at header offset 2", "spaces"]);
}

#[test]
fn other_trailing_padding_and_garbage_are_rejected() {
    for header in ["{}\n", "{}\t", "{} x", "{\"a\":"] {
        let msg = open_err(&raw_file(header.as_bytes(), b""));
        assert_has(&msg, &["invalid header"]);
    }
    let msg = open_err(&raw_file(b"{} {}", b""));
    assert_has(&msg, &["trailing characters"]);
}

#[test]
fn space_padding_is_valid() {
    let header = format!("{{\"w\":{}}}       ", entry("F32", "[2]", 0, 8));
    let dir = TempDir::new().unwrap();
    let path = write_bytes(
        &dir,
        "m.safetensors",
        &raw_file(header.as_bytes(), &f32_bytes(&[1.0, 2.0])),
    );
    let file = SafetensorsFile::open(&path).unwrap();
    assert_eq!(
        file.read("w").unwrap().to_f32_vec().unwrap(),
        vec![1.0, 2.0]
    );
    let (tensors, start) = parse_header(&raw_file(b"{}  ", b""), &path).unwrap();
    assert!(tensors.is_empty());
    assert_eq!(start, 12);
}

// ---- 5-6: layout of the data buffer ---------------------------------------------------------

#[test]
fn overlapping_offsets_are_rejected() {
    let header = format!(
        "{{\"a\":{},\"b\":{}}}",
        entry("F32", "[2]", 0, 8),
        entry("F32", "[2]", 4, 12)
    );
    let msg = open_err(&raw_file(header.as_bytes(), &[0; 12]));
    assert_has(&msg, &["\"a\" [0, 8]", "\"b\" [4, 12]", "overlap"]);
}

#[test]
fn gaps_between_tensors_are_rejected() {
    let header = format!(
        "{{\"a\":{},\"b\":{}}}",
        entry("F32", "[1]", 0, 4),
        entry("F32", "[1]", 8, 12)
    );
    let msg = open_err(&raw_file(header.as_bytes(), &[0; 12]));
    assert_has(
        &msg,
        &[
            "4 unused bytes [4, 8)",
            "\"b\"",
            "tensor \"a\"",
            "contiguously",
        ],
    );

    let header = format!("{{\"a\":{}}}", entry("F32", "[1]", 4, 8));
    let msg = open_err(&raw_file(header.as_bytes(), &[0; 8]));
    assert_has(
        &msg,
        &["4 unused bytes [0, 4)", "\"a\"", "start of the data buffer"],
    );
}

#[test]
fn two_names_on_one_byte_range_are_rejected() {
    let header = format!(
        "{{\"a\":{},\"b\":{}}}",
        entry("F32", "[2]", 0, 8),
        entry("F32", "[2]", 0, 8)
    );
    let msg = open_err(&raw_file(header.as_bytes(), &[0; 8]));
    assert_has(&msg, &["\"a\"", "\"b\"", "share the byte range [0, 8]"]);
}

#[test]
fn extra_bytes_after_last_tensor_are_rejected() {
    let header = format!("{{\"a\":{}}}", entry("F32", "[1]", 0, 4));
    let msg = open_err(&raw_file(header.as_bytes(), &[0; 6]));
    assert_has(
        &msg,
        &["2 extra bytes after the last tensor", "6 bytes", "end at 4"],
    );
}

#[test]
fn missing_bytes_and_offsets_beyond_buffer_are_rejected() {
    let header = format!("{{\"a\":{}}}", entry("F32", "[2]", 0, 8));
    let msg = open_err(&raw_file(header.as_bytes(), &[0; 4]));
    assert_has(
        &msg,
        &[
            "tensor \"a\"",
            "beyond the 4-byte data buffer",
            "4 bytes missing",
        ],
    );

    let header = format!("{{\"a\":{}}}", entry("U8", "[1]", u64::MAX - 1, u64::MAX));
    let msg = open_err(&raw_file(header.as_bytes(), &[0; 4]));
    assert_has(&msg, &["tensor \"a\"", "beyond"]);
}

#[test]
fn begin_after_end_is_rejected() {
    let header = format!("{{\"a\":{}}}", entry("F32", "[1]", 8, 4));
    let msg = open_err(&raw_file(header.as_bytes(), &[0; 8]));
    assert_has(&msg, &["tensor \"a\"", "begin 8 > end 4"]);
}

#[test]
fn data_offsets_need_two_entries() {
    let header = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}}"#;
    let msg = open_err(&raw_file(header.as_bytes(), &[0; 1]));
    assert_has(&msg, &["tensor \"a\"", "[begin, end]"]);
}

#[test]
fn zero_length_tensors_are_allowed() {
    let header = format!(
        "{{\"e\":{},\"a\":{},\"z\":{}}}",
        entry("F32", "[0]", 0, 0),
        entry("U8", "[2]", 0, 2),
        entry("F16", "[3,0]", 2, 2)
    );
    let (tensors, _) = parse_header(&raw_file(header.as_bytes(), &[1, 2]), Path::new("m")).unwrap();
    assert_eq!(tensors.len(), 3);
}

// ---- 7: dtype and shape --------------------------------------------------------------------

#[test]
fn shape_not_matching_byte_range_is_rejected() {
    let header = format!("{{\"layer.0.w\":{}}}", entry("F32", "[3]", 0, 8));
    let msg = open_err(&raw_file(header.as_bytes(), &[0; 8]));
    assert_has(&msg, &["tensor \"layer.0.w\"", "needs 12 bytes", "cover 8"]);
}

#[test]
fn shape_overflow_is_rejected() {
    for shape in [
        format!("[{}, 2]", u64::MAX),
        format!("[{}, 4]", 1u64 << 62),
        format!("[{}]", u64::MAX),
    ] {
        let header = format!("{{\"big\":{}}}", entry("F32", &shape, 0, 4));
        let msg = open_err(&raw_file(header.as_bytes(), &[0; 4]));
        assert_has(&msg, &["tensor \"big\"", "overflows"]);
    }
}

#[test]
fn negative_or_fractional_shape_is_rejected() {
    for shape in ["[-1]", "[1.5]", "\"4\""] {
        let header = format!("{{\"neg\":{}}}", entry("F32", shape, 0, 4));
        let msg = open_err(&raw_file(header.as_bytes(), &[0; 4]));
        assert_has(&msg, &["tensor \"neg\"", "invalid"]);
    }
}

#[test]
fn unknown_dtype_is_rejected() {
    for dtype in ["F33", "f32", "float32", ""] {
        let header = format!("{{\"w\":{}}}", entry(dtype, "[1]", 0, 4));
        let msg = open_err(&raw_file(header.as_bytes(), &[0; 4]));
        assert_has(&msg, &["tensor \"w\"", "unknown dtype", "valid: BOOL"]);
    }
}

#[test]
fn fp8_dtype_is_rejected_as_unsupported() {
    let header = format!("{{\"w\":{}}}", entry("F8_E4M3", "[4]", 0, 4));
    let msg = open_err(&raw_file(header.as_bytes(), &[0; 4]));
    assert_has(
        &msg,
        &[
            "tensor \"w\"",
            "F8_E4M3 is not supported",
            "supported: BOOL",
        ],
    );
}

#[test]
fn malformed_entries_are_rejected_with_the_tensor_name() {
    let cases = [
        r#"{"w":5}"#,
        r#"{"w":{"dtype":"U8","shape":[1]}}"#,
        r#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":1}}"#,
        r#"{"w":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
    ];
    for header in cases {
        let msg = open_err(&raw_file(header.as_bytes(), &[0; 1]));
        assert_has(&msg, &["tensor \"w\"", "valid entries are"]);
    }
}

// ---- 8-9: names and metadata ---------------------------------------------------------------

#[test]
fn duplicate_tensor_name_is_rejected() {
    let header = format!(
        "{{\"w\":{},\"w\":{}}}",
        entry("F32", "[1]", 0, 4),
        entry("F32", "[1]", 4, 8)
    );
    let msg = open_err(&raw_file(header.as_bytes(), &[0; 8]));
    assert_has(&msg, &["duplicate tensor name \"w\""]);
}

#[test]
fn empty_and_nul_names_are_rejected() {
    let header = format!("{{\"\":{}}}", entry("U8", "[1]", 0, 1));
    let msg = open_err(&raw_file(header.as_bytes(), &[0]));
    assert_has(&msg, &["invalid tensor name \"\"", "empty"]);

    for name in [r"\u0000", r"a\u0000b"] {
        let header = format!("{{\"{name}\":{}}}", entry("U8", "[1]", 0, 1));
        let msg = open_err(&raw_file(header.as_bytes(), &[0]));
        assert_has(&msg, &["invalid tensor name", "NUL character"]);
    }
}

#[test]
fn metadata_is_accepted_when_string_to_string() {
    let header = format!(
        "{{\"__metadata__\":{{\"format\":\"pt\"}},\"w\":{}}}",
        entry("U8", "[1]", 0, 1)
    );
    let (tensors, _) = parse_header(&raw_file(header.as_bytes(), &[7]), Path::new("m")).unwrap();
    assert_eq!(tensors.len(), 1);
    assert_eq!(tensors[0].name, "w");
}

#[test]
fn bad_metadata_is_rejected() {
    let cases = [
        (r#"{"__metadata__":{"a":1}}"#, "__metadata__"),
        (r#"{"__metadata__":[]}"#, "__metadata__"),
        (
            r#"{"__metadata__":{"a":"x","a":"y"}}"#,
            "the key \"a\" twice",
        ),
        (r#"{"__metadata__":{},"__metadata__":{}}"#, "appears twice"),
    ];
    for (header, expect) in cases {
        let msg = open_err(&raw_file(header.as_bytes(), b""));
        assert_has(&msg, &[expect]);
    }
}

// ---- 10: alignment ---------------------------------------------------------------------------

#[test]
fn misaligned_tensor_data_is_loaded_by_copying() {
    let body = format!(
        "{{\"b\":{},\"w\":{},\"d\":{},\"h\":{}}}",
        entry("U8", "[1]", 0, 1),
        entry("F32", "[3]", 1, 13),
        entry("F64", "[1]", 13, 21),
        entry("BF16", "[2]", 21, 25)
    );
    let mut header = body.clone();
    while (8 + header.len()) % 8 != 2 {
        header.push(' ');
    }
    let mut data = vec![9u8];
    data.extend(f32_bytes(&[1.5, -2.25, 3.0e7]));
    data.extend(0.125f64.to_le_bytes());
    data.extend(half::bf16::from_f32(-4.0).to_le_bytes());
    data.extend(half::bf16::from_f32(0.5).to_le_bytes());
    let dir = TempDir::new().unwrap();
    let path = write_bytes(&dir, "odd.safetensors", &raw_file(header.as_bytes(), &data));
    let file = SafetensorsFile::open(&path).unwrap();
    let w = file.tensors().iter().find(|t| t.name == "w").unwrap();
    assert_ne!(
        (8 + header.len() + w.begin) % 4,
        0,
        "the test must place w misaligned"
    );

    assert_eq!(file.read("b").unwrap().data, vec![9]);
    assert_eq!(
        file.read("w").unwrap().to_f32_vec().unwrap(),
        vec![1.5, -2.25, 3.0e7]
    );
    assert_eq!(file.read("d").unwrap().to_f32_vec().unwrap(), vec![0.125]);
    assert_eq!(
        file.read("h").unwrap().to_f32_vec().unwrap(),
        vec![-4.0, 0.5]
    );
}

// ---- Round trip, reading, conversion ----------------------------------------------------------

#[test]
fn write_then_read_round_trips_every_dtype() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("all.safetensors");
    let data: Vec<(WDtype, Vec<u8>)> = WDtype::ALL
        .iter()
        .map(|&d| (d, (0..2 * d.size_bytes() as u8).collect()))
        .collect();
    let names: Vec<String> = WDtype::ALL.iter().rev().map(|d| format!("t_{d}")).collect();
    let shape = [2usize];
    let tensors: Vec<(&str, WDtype, &[usize], &[u8])> = data
        .iter()
        .zip(&names)
        .map(|((d, bytes), name)| (name.as_str(), *d, &shape[..], bytes.as_slice()))
        .collect();
    write_safetensors(&path, &tensors).unwrap();

    let bytes = std::fs::read(&path).unwrap();
    let (_, start) = parse_header(&bytes, &path).unwrap();
    assert_eq!(start % 8, 0, "header must be padded to a multiple of 8");

    let set = WeightSet::open(&path).unwrap();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(set.names(), sorted);
    for ((dtype, bytes), name) in data.iter().zip(&names) {
        let raw = set.read(name).unwrap();
        assert_eq!(
            (raw.dtype, raw.shape.as_slice(), &raw.data),
            (*dtype, &[2usize][..], bytes)
        );
        let info = set.info(name).unwrap();
        assert_eq!((info.dtype, info.end - info.begin), (*dtype, bytes.len()));
    }
    assert!(set.info("nope").is_none());
}

#[test]
fn dtype_strings_round_trip() {
    for d in WDtype::ALL {
        assert_eq!(WDtype::from_safetensors_str(d.as_str()), Some(d));
    }
    assert_eq!(WDtype::BF16.size_bytes(), 2);
    assert_eq!(WDtype::Bool.as_str(), "BOOL");
    assert_eq!(WDtype::from_safetensors_str("bool"), None);
}

#[test]
fn to_f32_converts_half_types_and_rejects_integers() {
    let f16 = RawTensor {
        dtype: WDtype::F16,
        shape: vec![2],
        data: [1.0f32, -0.5]
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect(),
    };
    assert_eq!(f16.to_f32_vec().unwrap(), vec![1.0, -0.5]);

    let ints = RawTensor {
        dtype: WDtype::I64,
        shape: vec![1],
        data: vec![0; 8],
    };
    assert_has(
        &ints.to_f32_vec().unwrap_err().to_string(),
        &["dtype I64", "F16, BF16, F32, F64"],
    );

    let short = RawTensor {
        dtype: WDtype::F32,
        shape: vec![2],
        data: vec![0; 7],
    };
    assert_has(
        &short.to_f32_vec().unwrap_err().to_string(),
        &["7 bytes", "shape [2]"],
    );
}

#[test]
fn to_f32_placed_can_transpose_a_matrix_in_every_float_dtype() {
    let m = [1.0f32, 2.0, 3.0, -4.0, 5.5, 6.0]; // (2, 3) row-major
    let want = vec![1.0, -4.0, 2.0, 5.5, 3.0, 6.0]; // (3, 2) row-major
    let encodings: [(WDtype, Vec<u8>); 4] = [
        (
            WDtype::F32,
            m.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
        (
            WDtype::F64,
            m.iter().flat_map(|&v| (v as f64).to_le_bytes()).collect(),
        ),
        (
            WDtype::F16,
            m.iter()
                .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                .collect(),
        ),
        (
            WDtype::BF16,
            m.iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                .collect(),
        ),
    ];
    for (dtype, data) in encodings {
        let t = RawTensor {
            dtype,
            shape: vec![2, 3],
            data,
        };
        let transposed = t.to_f32_vec_placed(|k| (k % 3) * 2 + k / 3).unwrap();
        assert_eq!(transposed, want, "{dtype}");
        assert_eq!(t.to_f32_vec().unwrap(), m.to_vec(), "{dtype}");
    }
}

#[test]
fn write_safetensors_refuses_invalid_input() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("bad.safetensors");
    let err = write_safetensors(&path, &[("w", WDtype::F32, &[2], &[0; 4])]).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    let err = write_safetensors(
        &path,
        &[("w", WDtype::U8, &[1], &[0]), ("w", WDtype::U8, &[1], &[0])],
    )
    .unwrap_err();
    assert!(err.to_string().contains("duplicate"), "{err}");
    assert!(!path.exists());
    write_safetensors(&path, &[("quote\"d\\name", WDtype::U8, &[1], &[3])]).unwrap();
    assert_eq!(
        SafetensorsFile::open(&path)
            .unwrap()
            .read("quote\"d\\name")
            .unwrap()
            .data,
        vec![3]
    );
}

#[test]
fn reading_unknown_tensor_names_the_file() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("m.safetensors");
    write_safetensors(&path, &[("w", WDtype::U8, &[1], &[1])]).unwrap();
    let msg = WeightSet::open(&path)
        .unwrap()
        .read("missing")
        .unwrap_err()
        .to_string();
    assert_has(
        &msg,
        &[
            &path.display().to_string(),
            "no tensor named \"missing\"",
            "1 tensors",
        ],
    );
    let msg = SafetensorsFile::open(&path)
        .unwrap()
        .read("x")
        .unwrap_err()
        .to_string();
    assert_has(&msg, &["no tensor named \"x\""]);
}

#[test]
fn missing_file_and_directory_are_clear_errors() {
    let dir = TempDir::new().unwrap();
    let msg = SafetensorsFile::open(dir.path()).unwrap_err().to_string();
    assert_has(&msg, &["not a regular file"]);
    let missing = dir.path().join("none.safetensors");
    let msg = WeightSet::open(&missing).unwrap_err().to_string();
    assert_has(&msg, &[&missing.display().to_string(), "cannot read"]);
}

#[test]
fn arbitrary_corruption_never_panics() {
    let header = format!(
        "{{\"__metadata__\":{{\"k\":\"v\"}},\"a\":{},\"b\":{}}}",
        entry("F32", "[2]", 0, 8),
        entry("BF16", "[1,2]", 8, 12)
    );
    let valid = raw_file(header.as_bytes(), &[0; 12]);
    let path = Path::new("fuzz.safetensors");
    parse_header(&valid, path).unwrap();
    for len in 0..valid.len() {
        let _ = parse_header(&valid[..len], path);
    }
    let values = [
        0u8, 0xFF, 0x7F, b'{', b'}', b'[', b']', b'"', b',', b':', b'-', b'9', b'e', b' ', 0x80,
    ];
    for i in 0..valid.len() {
        for &v in &values {
            let mut bytes = valid.clone();
            bytes[i] = v;
            let _ = parse_header(&bytes, path);
        }
    }
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..20_000 {
        let mut bytes = valid.clone();
        for _ in 0..3 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let i = (state % bytes.len() as u64) as usize;
            bytes[i] = (state >> 32) as u8;
        }
        let _ = parse_header(&bytes, path);
    }
}

// ---- 11: sharded checkpoints -----------------------------------------------------------------

/// Writes shard 1 (a, b), shard 2 (c) and returns (dir, index path) for `weight_map`.
fn sharded(weight_map: &str, shard2_extra: Option<&str>) -> (TempDir, PathBuf) {
    let dir = TempDir::new().unwrap();
    let one = f32_bytes(&[1.0]);
    let two = f32_bytes(&[2.0, 3.0]);
    write_safetensors(
        &dir.path().join("model-00001-of-00002.safetensors"),
        &[
            ("a", WDtype::F32, &[1], &one),
            ("b", WDtype::F32, &[2], &two),
        ],
    )
    .unwrap();
    let mut shard2: Vec<(&str, WDtype, &[usize], &[u8])> = vec![("c", WDtype::F32, &[1], &one)];
    if let Some(extra) = shard2_extra {
        shard2.push((extra, WDtype::F32, &[1], &one));
    }
    write_safetensors(
        &dir.path().join("model-00002-of-00002.safetensors"),
        &shard2,
    )
    .unwrap();
    let index = write_bytes(
        &dir,
        "model.safetensors.index.json",
        format!("{{\"metadata\":{{\"total_size\":16}},\"weight_map\":{weight_map}}}").as_bytes(),
    );
    (dir, index)
}

const GOOD_MAP: &str = r#"{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"./model-00002-of-00002.safetensors"}"#;

fn sharded_err(weight_map: &str, shard2_extra: Option<&str>) -> String {
    let (_dir, index) = sharded(weight_map, shard2_extra);
    let msg = WeightSet::open(&index)
        .expect_err("index should be rejected")
        .to_string();
    assert!(
        msg.contains(&index.display().to_string()),
        "error does not name the index: {msg}"
    );
    msg
}

#[test]
fn valid_sharded_checkpoint_reads_every_tensor() {
    let (_dir, index) = sharded(GOOD_MAP, None);
    let set = WeightSet::open(&index).unwrap();
    assert_eq!(set.names(), vec!["a", "b", "c"]);
    assert_eq!(set.read("b").unwrap().to_f32_vec().unwrap(), vec![2.0, 3.0]);
    assert_eq!(set.read("c").unwrap().to_f32_vec().unwrap(), vec![1.0]);
    assert_eq!(set.info("b").unwrap().shape, vec![2]);
    assert_eq!(set.source(), index.as_path());
}

#[test]
fn missing_shard_is_rejected() {
    let map = r#"{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00003.safetensors"}"#;
    let msg = sharded_err(map, None);
    assert_has(
        &msg,
        &["model-00003.safetensors", "tensor \"c\"", "does not exist"],
    );
}

#[test]
fn shard_paths_escaping_the_directory_are_rejected() {
    for shard in [
        "../model-00002-of-00002.safetensors",
        "sub/../../x.safetensors",
        "/etc/passwd",
        "",
    ] {
        let map = format!(
            r#"{{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"{shard}"}}"#
        );
        let msg = sharded_err(&map, None);
        assert_has(&msg, &["tensor \"c\"", "unsafe", "relative path"]);
    }
}

#[test]
fn tensor_in_two_shards_is_rejected() {
    let msg = sharded_err(GOOD_MAP, Some("a"));
    assert_has(
        &msg,
        &[
            "tensor \"a\"",
            "two shards",
            "model-00001-of-00002",
            "model-00002-of-00002",
        ],
    );
}

#[test]
fn weight_map_naming_a_tensor_its_shard_lacks_is_rejected() {
    let map = r#"{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors","d":"model-00001-of-00002.safetensors"}"#;
    let msg = sharded_err(map, None);
    assert_has(
        &msg,
        &[
            "\"d\"",
            "model-00001-of-00002.safetensors",
            "does not contain it",
        ],
    );

    let map = r#"{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00001-of-00002.safetensors","d":"model-00002-of-00002.safetensors"}"#;
    let msg = sharded_err(map, Some("d"));
    assert_has(&msg, &["\"c\"", "does not contain it", "(it is in"]);
}

#[test]
fn shard_tensor_missing_from_weight_map_is_rejected() {
    let msg = sharded_err(GOOD_MAP, Some("extra"));
    assert_has(&msg, &["\"extra\"", "does not list"]);
}

#[test]
fn malformed_index_files_are_rejected() {
    let cases = [
        (
            r#"{"a":"model-00001-of-00002.safetensors","a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}"#,
            "lists tensor \"a\" twice",
        ),
        ("{}", "weight_map is empty"),
        ("[]", "invalid index"),
        (r#"{"a":1}"#, "invalid index"),
    ];
    for (map, expect) in cases {
        assert_has(&sharded_err(map, None), &[expect]);
    }
    let dir = TempDir::new().unwrap();
    for (body, expect) in [
        (r#"{"metadata":{}}"#, "missing field `weight_map`"),
        (r#"{"weight_map":{},"other":1}"#, "unknown key \"other\""),
        (r#"{"weight_map":{},"weight_map":{}}"#, "appears twice"),
        ("{\"weight_map\":", "invalid index"),
        ("\u{FEFF}{}", "invalid index"),
    ] {
        let index = write_bytes(&dir, "x.index.json", body.as_bytes());
        let msg = WeightSet::open(&index).unwrap_err().to_string();
        assert_has(&msg, &[&index.display().to_string(), expect]);
    }
}
