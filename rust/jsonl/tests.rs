//! Tests of the record schema and of cutting chunks into lines.

use super::*;

fn err(line: &str) -> String {
    parse_line(0, line.as_bytes()).unwrap_err().to_string()
}

#[test]
fn parses_every_field_and_borrows_plain_strings() {
    let line = br#"{"url":"http://a.example.com/","action":"delete","lock":true,"pagerank":80,
        "metadata":{"b":["2","1"],"a":"x"},"content_base64":"aGk=","last_modified":1700000000}"#;
    let r = parse_line(3, line).unwrap();
    assert_eq!(r.url, "http://a.example.com/");
    assert_eq!(
        (r.action, r.lock, r.pagerank),
        (Some(Action::Delete), Some(true), Some(80))
    );
    assert_eq!(
        r.metadata,
        [
            ("a".into(), "x".into()),
            ("b".into(), "2".into()),
            ("b".into(), "1".into())
        ]
    );
    assert!(matches!(
        r.content,
        Some(Content::Base64(Cow::Borrowed("aGk=")))
    ));
    assert!(matches!(r.last_modified, Some(Timestamp::Epoch(_))));
}

#[test]
fn a_metadata_name_given_twice_is_refused_not_overwritten() {
    assert_eq!(
        err(r#"{"url":"x","metadata":{"k":"v1","k":"v2"}}"#),
        "record 0: field 'metadata': the name 'k' is given twice: give its values as one list"
    );
}

#[test]
fn a_mistyped_field_is_named_with_the_one_meant() {
    assert_eq!(
        err(r#"{"url":"x","conent":"a"}"#),
        "record 0: unknown field 'conent': did you mean 'content'?"
    );
    assert!(err(r#"{"url":"x","Mimetype":"a"}"#).contains("did you mean 'mimetype'?"));
    assert!(err(r#"{"url":"x","zzzzzz":1}"#).contains("(fields: url, action,"));
}

#[test]
fn a_long_value_or_name_is_quoted_cut_short_with_its_length() {
    assert_eq!(
        err(&format!(
            r#"{{"url":"x","lock":"{}"}}"#,
            "x".repeat(1 << 20)
        )),
        format!(
            "record 0: field 'lock': invalid type: string \"{}…\" (1048576 characters), \
             expected true or false",
            "x".repeat(100)
        )
    );
    // A quote escaped in the value does not end it: serde quotes it as `x\"`.
    let quotes = err(&format!(
        r#"{{"url":"x","lock":"{}"}}"#,
        r#"x\""#.repeat(1 << 20)
    ));
    let cut = r#"x\""#.repeat(33) + "x";
    assert!(quotes.ends_with(&format!(
        "\"{cut}…\" (3145728 characters), expected true or false"
    )));
    let name = "k".repeat(1 << 20);
    let message = err(&format!(r#"{{"url":"x","{name}":1}}"#));
    assert!(message.starts_with(&format!(
        "record 0: unknown field '{}…' (fields: url,",
        &name[..100]
    )));
    // The quotes of an unknown field named with a backtick no longer match: the message is cut.
    let name = format!("a`{}", "k".repeat(1 << 20));
    let message = err(&format!(r#"{{"url":"x","{name}":1}}"#));
    assert!(message.len() < 2500, "{}", message.len());
}

#[test]
fn a_byte_order_mark_is_named() {
    assert!(err("\u{feff}{\"url\":\"x\"}").contains("byte order mark"));
}

#[test]
fn errors_name_the_field() {
    assert_eq!(
        err(r#"{"url":"x","lock":"yes"}"#),
        "record 0: field 'lock': invalid type: string \"yes\", expected true or false"
    );
    assert!(err(r#"{"url":"x","colour":1}"#).contains("unknown field 'colour'"));
    assert!(err(r#"{"url":"x","metadata":{"a":5}}"#)
        .contains("field 'metadata': 'a': expected a string or a list"));
    assert!(err(r#"{"url":"x","last_modified":true}"#)
        .contains("field 'last_modified': expected a date"));
    assert!(
        err(r#"{"url":"x","action":"drop"}"#).contains("field 'action': 'drop' is not an action")
    );
    assert!(err(r#"{"url":"x"} {}"#).contains("not a JSON object"));
    assert_eq!(err("[1]"), "record 0: expected a JSON object, one per line");
    assert_eq!(
        parse_line(0, b"{\"url\":\"\xff\"}")
            .unwrap_err()
            .to_string(),
        "record 0: field 'url': not valid UTF-8 (byte 8 of the line)"
    );
    // The same, after a long content that is read apart from the rest of the line.
    let mut line = format!(r#"{{"content":"{}","url":""#, "x".repeat(300)).into_bytes();
    line.extend_from_slice(b"\xff\"}");
    assert_eq!(
        parse_line(0, &line).unwrap_err().to_string(),
        "record 0: field 'url': not valid UTF-8 (byte 321 of the line)"
    );
}

/// The lines of a chunk, found another way.
fn lines(chunk: &[u8]) -> (Vec<(usize, &[u8])>, usize) {
    let mut all: Vec<&[u8]> = chunk.split(|&b| b == b'\n').collect();
    if chunk.is_empty() || chunk.ends_with(b"\n") {
        all.pop();
    }
    let found = (all.iter().copied().enumerate())
        .filter(|(_, line)| !line.iter().all(u8::is_ascii_whitespace))
        .collect();
    (found, all.len())
}

#[test]
fn lines_skip_blanks_but_count_them() {
    let chunk = b"{}\n\n  \n{}\r\n{}";
    let (found, count) = lines_in(chunk, 0..chunk.len());
    assert_eq!(found.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [0, 3, 4]);
    assert_eq!(found[2].1, b"{}");
    assert_eq!(count, 5);
    assert_eq!(lines_in(b"{}\n{}\n", 0..6).1, 2);
    assert_eq!(lines_in(b"\n", 0..1).1, 1);
    assert_eq!(lines_in(b"", 0..0).1, 0);
}

#[test]
fn a_last_line_cut_anywhere_is_cut_short_and_a_whole_one_is_not() {
    let line = r#"{"url": "http://a.example.com/é", "pagerank": -1.5e2, "lock": true,
        "metadata": {"tags": ["a\"b", "\u00e9"]}, "acl": null}"#
        .replace('\n', " ");
    let line = line.as_bytes();
    assert!(!cut_short(line));
    assert!(!cut_short(b"{} \r"));
    assert!(!cut_short(b"  "));
    // A cut inside a number ("-", "1.") is a syntax error to serde, not an early end: it is
    // at the line's last byte.
    assert!(cut_short(br#"{"a":1."#));
    assert!(cut_short(br#"{"a":-"#));
    for end in 1..line.len() {
        assert!(
            cut_short(&line[..end]),
            "{:?}",
            String::from_utf8_lossy(&line[..end])
        );
    }
}

#[test]
fn a_last_line_whole_is_refused_for_what_is_wrong_and_any_other_is_cut() {
    // Whole JSON: refused, if it is, as with a newline (the byte order mark, no object).
    let with_bom = "\u{feff}{\"url\": \"http://a.example.com/\"}";
    assert!(!cut_short(with_bom.as_bytes()));
    assert!(!cut_short(b"[1, 2]"));
    assert!(!cut_short("\u{feff}".as_bytes()));
    // Not whole: cut, whatever else is wrong before the end (the cut may follow the fault).
    // (The byte order mark alone, its first 3 bytes, is whole.)
    for end in (1..3).chain(4..with_bom.len()) {
        assert!(cut_short(&with_bom.as_bytes()[..end]), "{end}");
    }
    assert!(cut_short(b"[1, 2"));
    assert!(cut_short(br#"{"a": nul, "content": "ab"#));
    assert!(cut_short(b"{\"a\": \"tab\there\", \"b\": \"c"));
}

#[test]
fn the_lines_of_all_pieces_are_the_lines_of_the_chunk_once_each() {
    let mut chunk = Vec::new();
    for n in 0..40usize {
        chunk.extend(std::iter::repeat_n(b'x', n * 17_001 % 300_000));
        chunk.extend_from_slice(if n % 3 == 0 { b"\n\n" } else { b"\n" });
    }
    for end in [
        chunk.len(),
        chunk.len() - 1,
        300_000,
        262_144,
        262_145,
        4097,
        1,
        0,
    ] {
        let chunk = &chunk[..end];
        for count in [1, 3, 16, 1000] {
            let mut joined = Vec::new();
            let mut total = 0;
            for part in pieces(chunk.len(), count) {
                let (found, n) = lines_in(chunk, part);
                joined.extend(found.into_iter().map(|(i, line)| (i + total, line)));
                total += n;
            }
            assert_eq!(
                (joined, total),
                lines(chunk),
                "{end} bytes in {count} pieces"
            );
        }
    }
    // Short lines (a directory's files, say) are shared out too.
    let line = br#"{"url":"http://f.example.com/lib/python3.11/json/decoder.py","content_path":"/usr/lib/python3.11/json/decoder.py"}"#;
    let short = [&line[..], b"\n"].concat().repeat(1000);
    let parts = pieces(short.len(), 16);
    assert!(parts.len() >= 8);
    assert!(parts.into_iter().all(|p| lines_in(&short, p).1 > 0));
}

#[test]
fn chunks_that_name_files_are_cut_by_what_their_records_cost() {
    let mut chunk = Vec::new();
    for n in 0..64 {
        chunk.extend_from_slice(format!("{{\"url\":\"http://f.example.com/{n}\",").as_bytes());
        chunk.extend_from_slice(format!("\"content_path\":\"/f/{n}\"}}\n").as_bytes());
        if n % 5 == 0 {
            chunk.extend_from_slice(b"{\"url\":\"http://f.example.com/t\",\"content\":\"x\"}\n\n");
        }
    }
    assert!(names_files(&chunk) && !names_files(b"{\"content\":\"content path\"}"));
    let escaped = br#"{"content_path" : "/f/a\"b\u00e9"}"#;
    assert_eq!(
        content_path_of(escaped),
        Some(PathBuf::from("/f/a\"b\u{e9}"))
    );
    assert_eq!(content_path_of(br#"{"content_path": null}"#), None);
    // File 40 is as big as all the others together: it stands alone.
    let size = |path: &std::path::Path| {
        if path.ends_with("40") {
            63_000_000
        } else {
            1_000_000
        }
    };
    let mut asked = Vec::new();
    // What the planner made of each file (here its path) goes with the part of its line.
    let parts = cut_by_cost(&chunk, 0..chunk.len(), 8, |paths| {
        asked = paths.iter().map(|p| p.to_path_buf()).collect();
        paths.iter().map(|p| (size(p), p.to_path_buf())).collect()
    });
    assert_eq!(asked.len(), 64);
    assert_eq!(asked[40], std::path::Path::new("/f/40"));
    let heavy: Vec<_> = parts.iter().filter(|p| p.cost > 60_000_000).collect();
    assert_eq!(heavy.len(), 1);
    assert_eq!(lines_in(&chunk, heavy[0].lines.clone()).1, 1);
    assert!(parts.len() >= 5, "{} parts", parts.len());
    // Parts start at line starts, cover the chunk, and their lines are the chunk's, once each.
    assert_eq!(parts.first().unwrap().lines.start, 0);
    assert_eq!(parts.last().unwrap().lines.end, chunk.len());
    assert!(parts
        .windows(2)
        .all(|w| w[0].lines.end == w[1].lines.start && chunk[w[1].lines.start - 1] == b'\n'));
    let mut joined = Vec::new();
    let mut total = 0;
    let mut handed = 0;
    for part in parts {
        let (found, n) = lines_in(&chunk, part.lines.clone());
        // Each line that names a file gets what was made of its own file, in order.
        let naming: Vec<(usize, PathBuf)> = found
            .iter()
            .filter_map(|(_, line)| {
                let at = line.as_ptr() as usize - chunk.as_ptr() as usize;
                content_path_of(line).map(|path| (at, path))
            })
            .collect();
        assert_eq!(part.files, naming);
        handed += part.files.len();
        joined.extend(found.into_iter().map(|(i, line)| (i + total, line)));
        total += n;
    }
    assert_eq!(handed, 64);
    assert_eq!((joined, total), lines(&chunk));

    // Planned in two waves cut at a line start, the parts of both are those of one chunk.
    let mid = chunk[chunk.len() / 3..]
        .iter()
        .position(|&b| b == b'\n')
        .unwrap()
        + chunk.len() / 3
        + 1;
    let open = |paths: &[&std::path::Path]| paths.iter().map(|p| (size(p), ())).collect();
    let mut waves = cut_by_cost(&chunk, 0..mid, 2, open);
    assert_eq!(waves.last().unwrap().lines.end, mid);
    waves.extend(cut_by_cost(&chunk, mid..chunk.len(), 6, open));
    assert!(waves.windows(2).all(|w| w[0].lines.end == w[1].lines.start));
    assert_eq!(waves.iter().map(|p| p.files.len()).sum::<usize>(), 64);
    let mut total = 0;
    for part in &waves {
        total += lines_in(&chunk, part.lines.clone()).1;
    }
    assert_eq!(total, lines(&chunk).1);
}

/// The fields of a struct as its derived `Deserialize` knows them: serde hands them to the
/// deserializer, which here keeps them and stops.
fn serde_fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    #[derive(Debug)]
    struct Found(&'static [&'static str]);
    impl std::fmt::Display for Found {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("not a struct")
        }
    }
    impl std::error::Error for Found {}
    impl serde::de::Error for Found {
        fn custom<T: std::fmt::Display>(_: T) -> Self {
            Found(&[])
        }
    }
    struct Probe;
    impl<'de> serde::Deserializer<'de> for Probe {
        type Error = Found;
        fn deserialize_any<V: serde::de::Visitor<'de>>(
            self,
            _: V,
        ) -> std::result::Result<V::Value, Found> {
            Err(Found(&[]))
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> std::result::Result<V::Value, Found> {
            Err(Found(fields))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }
    T::deserialize(Probe).map_or_else(|found| found.0, |_| &[])
}

#[test]
fn the_field_list_is_the_schema_s() {
    // Every reader takes its fields from FIELDS (the batch API, the seedlist store, the
    // `Record` TypedDict): a field added to the schema must be added there.
    assert_eq!(FIELDS, serde_fields::<RawRecord<'_>>());
}

#[test]
fn a_short_content_besides_a_long_one_is_refused_not_dropped() {
    // The long one is read apart from the line (see `lift`), the short one with the rest.
    let line = format!(
        r#"{{"url":"http://a.example.com/","content":"{}","content_base64":"aGk="}}"#,
        "x".repeat(300)
    );
    assert_eq!(
        err(&line),
        "record 0: field 'content': give at most one of content, content_base64 and content_path"
    );
}

#[test]
fn a_line_with_a_long_content_is_refused_as_one_with_a_short_one() {
    // A long content is read apart from the line (see `lift`), and the line refused for what
    // is wrong in the rest of it alone, with the words said of a line read whole.
    let faults = [
        r#","pagerank":"x""#,
        r#","bogus":1"#,
        r#","content":"again""#,
        r#","content_path":"/a""#,
        r#","metadata":{"a":1}"#,
        r#","action":"drop""#,
        r#"} {"#,
    ];
    for fault in faults {
        let line = |content: &str| {
            err(&format!(
                r#"{{"url":"http://a.example.com/","content":"{content}"{fault}}}"#
            ))
        };
        let short = line("a\\nb");
        assert_eq!(line(&"a\\nb".repeat(100)), short);
        assert_eq!(line(&"x".repeat(300)), short);
    }
}

#[test]
fn a_mistyped_field_inside_a_field_is_named_with_the_one_meant_there() {
    assert_eq!(
        err(r#"{"url":"x","acl":{"principals":[{"name":"a","scope":"user","acess":"permit"}]}}"#),
        "record 0: field 'acl': unknown field 'acess': did you mean 'access'?"
    );
}

/// Ten lines naming the files /f/0 to /f/9, and where each starts.
fn ten_lines_naming_files() -> (Vec<u8>, Vec<usize>) {
    let chunk: Vec<u8> = (0..10)
        .flat_map(|n| {
            format!("{{\"url\":\"http://f.example.com/{n}\",\"content_path\":\"/f/{n}\"}}\n")
                .into_bytes()
        })
        .collect();
    let starts = std::iter::once(0)
        .chain(memchr::memchr_iter(b'\n', &chunk).map(|k| k + 1))
        .collect();
    (chunk, starts)
}

#[test]
fn a_round_takes_the_lines_before_the_big_file_past_its_budget_and_one_at_least() {
    let (chunk, starts) = ten_lines_naming_files();
    // Files of 4 units are big (3 or more), file 1 small: the budget of 10 takes 0, 1, 2 and
    // leaves 3 on.
    let size = |p: &std::path::Path| if p.ends_with("1") { 1 } else { 4 };
    let open =
        |paths: &[&std::path::Path]| paths.iter().map(|p| (size(p), p.to_path_buf())).collect();
    let budget = |bytes, files| FileBudget {
        big: 3,
        bytes,
        files,
        held: 100,
        named: 100,
        taken: (0, 0),
    };
    let mut left = budget(10, 100);
    let (parts, taken) = cut_within(&chunk, 0..chunk.len(), 4, open, Some(&mut left));
    assert_eq!(taken, starts[3]);
    assert_eq!((left.bytes, left.files), (2, 98));
    assert_eq!(parts.last().unwrap().lines.end, starts[3]);
    let handed: Vec<PathBuf> = parts
        .into_iter()
        .flat_map(|p| p.files)
        .map(|(_, f)| f)
        .collect();
    assert_eq!(handed, ["/f/0", "/f/1", "/f/2"].map(PathBuf::from));
    // Nothing left: the next round still takes its first line; a count runs out as bytes do.
    let (_, taken) = cut_within(
        &chunk,
        starts[3]..chunk.len(),
        4,
        open,
        Some(&mut budget(0, 100)),
    );
    assert_eq!(taken, starts[4]);
    let (_, taken) = cut_within(&chunk, 0..chunk.len(), 4, open, Some(&mut budget(100, 2)));
    assert_eq!(taken, starts[3]);
    // No budget: every line.
    let (_, taken) = cut_within(&chunk, 0..chunk.len(), 4, open, None);
    assert_eq!(taken, chunk.len());
}

/// A round's budget of `held` units of small files (under 3) and `named` files.
fn small_files_budget(held: u64, named: usize) -> FileBudget {
    FileBudget {
        big: 3,
        bytes: 100,
        files: 100,
        held,
        named,
        taken: (0, 0),
    }
}

#[test]
fn a_round_takes_small_files_up_to_its_held_bytes_and_names_up_to_its_count() {
    let (chunk, starts) = ten_lines_naming_files();
    // Every file is small (2 units, under the big ones' 3): their records wait in memory.
    let asked = std::cell::Cell::new(0);
    let open = |paths: &[&std::path::Path]| {
        asked.set(paths.len());
        paths.iter().map(|p| (2, p.to_path_buf())).collect()
    };
    let mut left = small_files_budget(7, 100);
    let (_, taken) = cut_within(&chunk, 0..chunk.len(), 4, open, Some(&mut left));
    assert_eq!(taken, starts[3]);
    assert_eq!(left.held, 1);
    // Only so many files are looked at, and opened, for a round.
    let mut left = small_files_budget(100, 4);
    let (parts, taken) = cut_within(&chunk, 0..chunk.len(), 4, open, Some(&mut left));
    assert_eq!((taken, asked.get(), left.named), (starts[4], 4, 0));
    assert_eq!(parts.iter().map(|p| p.files.len()).sum::<usize>(), 4);
}

#[test]
fn a_round_planned_in_waves_passes_its_budget_by_its_first_file_only() {
    let (chunk, starts) = ten_lines_naming_files();
    // Small files of 2 units, 7 of them held: the first wave takes three, and the second,
    // whose first line would pass what is left, none.
    let open = |paths: &[&std::path::Path]| paths.iter().map(|p| (2, p.to_path_buf())).collect();
    let mut left = small_files_budget(7, 100);
    let (_, taken) = cut_within(&chunk, 0..starts[3], 4, open, Some(&mut left));
    assert_eq!((taken, left.held, left.taken), (starts[3], 1, (3, 6)));
    let (parts, taken) = cut_within(&chunk, starts[3]..chunk.len(), 4, open, Some(&mut left));
    assert_eq!((taken, parts.len(), left.held), (starts[3], 0, 1));
    // So with the count of files: a wave after one that took them all takes none.
    let mut left = small_files_budget(100, 3);
    let (_, taken) = cut_within(&chunk, 0..starts[3], 4, open, Some(&mut left));
    assert_eq!(taken, starts[3]);
    let (parts, taken) = cut_within(&chunk, starts[3]..chunk.len(), 4, open, Some(&mut left));
    assert_eq!((taken, parts.len()), (starts[3], 0));
    // A round that took nothing yet takes its first file, whatever its size.
    let mut left = small_files_budget(1, 100);
    let (_, taken) = cut_within(&chunk, starts[3]..chunk.len(), 4, open, Some(&mut left));
    assert_eq!((taken, left.held), (starts[4], 0));
}

#[test]
fn a_round_ends_before_the_first_file_left_unopened() {
    let (chunk, starts) = ten_lines_naming_files();
    let open =
        |paths: &[&std::path::Path]| paths[..3].iter().map(|p| (1, p.to_path_buf())).collect();
    let (parts, taken) = cut_within(&chunk, 0..chunk.len(), 4, open, None);
    assert_eq!(taken, starts[3]);
    assert_eq!(parts.last().unwrap().lines.end, starts[3]);
}
