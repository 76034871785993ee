//! Stage by stage throughput of the core, per core: escaping, base64, deflate at each level,
//! and whole records. Run: `cargo bench --bench stages`.
//!
//! Targets (DEVELOPERS/issue 2): escaping >= 2.5 GB/s on clean text, base64 >= 3 GB/s.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fastfeed_core::encode::{base64_into, Compress, Deflater, Scratch};
use fastfeed_core::escape::{escape_into_by, text_into_by, Context, Scan};
use fastfeed_core::record::{AclFormat, EncodeOptions, FeedKind, FeedType};
use fastfeed_core::{Content, Record};

/// Deterministic pseudo-random bytes (xorshift), so runs compare.
fn noise(n: usize) -> Vec<u8> {
    let mut s = 0x9E3779B97F4A7C15u64;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

/// Prose-like text: words from a small vocabulary with line breaks, like real documents, with
/// markup every `markup` words on average (0: none).
fn prose(n: usize, markup: usize) -> String {
    let words = [
        "search",
        "appliance",
        "feed",
        "document",
        "the",
        "index",
        "crawler",
        "données",
        "naïve",
        "content",
        "metadata",
        "日本語",
        "of",
        "and",
        "record",
    ];
    let mut out = String::with_capacity(n + 16);
    let mut i = 0usize;
    while out.len() < n {
        i = i
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.push_str(words[(i >> 33) % words.len()]);
        out.push(if (i >> 20).is_multiple_of(13) {
            '\n'
        } else {
            ' '
        });
        if markup > 0 && (i >> 40).is_multiple_of(markup) {
            out.push_str("<b>&amp;</b> ");
        }
    }
    out
}

fn escaping(c: &mut Criterion) {
    let mut g = c.benchmark_group("escape");
    for (name, text) in [
        ("clean", prose(1 << 20, 0)),
        ("markup", prose(1 << 20, 7)),
        // About as dense as the text of the records benchmarks (benches/bench_build.py).
        ("dense", prose(1 << 20, 2)),
    ] {
        g.throughput(Throughput::Bytes(text.len() as u64));
        let mut out = Vec::with_capacity(text.len() * 2);
        // Each scan the CPU runs (`escape_into` takes the last): SSE2, AVX2.
        for scan in Scan::available() {
            g.bench_function(BenchmarkId::new(name, format!("{scan:?}")), |b| {
                b.iter(|| {
                    out.clear();
                    escape_into_by(scan, &mut out, black_box(&text), Context::Text).unwrap();
                })
            });
            // As a feed's content: escaped, or in CDATA sections where they are shorter.
            g.bench_function(BenchmarkId::new(name, format!("{scan:?} content")), |b| {
                b.iter(|| {
                    out.clear();
                    text_into_by(scan, &mut out, black_box(&text)).unwrap();
                })
            });
        }
    }
    g.finish();
}

fn base64(c: &mut Criterion) {
    let data = noise(1 << 20);
    let mut g = c.benchmark_group("base64");
    g.throughput(Throughput::Bytes(data.len() as u64));
    let mut out = Vec::with_capacity(data.len() * 2);
    g.bench_function("encode", |b| {
        b.iter(|| {
            out.clear();
            base64_into(&mut out, black_box(&data));
        })
    });
    g.finish();
}

/// Compressible binary: structured records with repetition, like office documents' XML.
fn compressible(n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n);
    let mut i = 0u32;
    while out.len() < n {
        out.extend_from_slice(format!("<row id=\"{i}\"><cell>{}</cell></row>", i % 97).as_bytes());
        i += 1;
    }
    out.truncate(n);
    out
}

fn deflate(c: &mut Criterion) {
    let data = compressible(1 << 20);
    let mut g = c.benchmark_group("deflate");
    g.throughput(Throughput::Bytes(data.len() as u64));
    for level in [1u8, 3, 6] {
        let mut d = Deflater::new(level);
        let (_, z) = d.choose(&data, Compress::Always);
        eprintln!(
            "deflate level {level}: ratio {:.3}",
            z.len() as f64 / data.len() as f64
        );
        g.bench_with_input(BenchmarkId::from_parameter(level), &level, |b, _| {
            b.iter(|| black_box(d.choose(black_box(&data), Compress::Always).1.len()))
        });
    }
    let random = noise(1 << 20);
    let mut d = Deflater::new(1);
    g.bench_function("auto-skips-incompressible", |b| {
        b.iter(|| black_box(d.choose(black_box(&random), Compress::Auto).1.len()))
    });
    g.finish();
}

fn records(c: &mut Criterion) {
    let kind = FeedKind {
        feedtype: FeedType::Incremental,
        web: false,
    };
    let opts = EncodeOptions {
        compress: Compress::Auto,
        acl_format: AclFormat::PerUrl,
    };
    let rec = Record {
        url: "http://docs.example.com/a/b/c.html".into(),
        metadata: vec![
            ("author".into(), "someone".into()),
            ("tags".into(), "a".into()),
        ],
        content: Some(Content::Text(prose(1024, 7).into())),
        ..Default::default()
    };
    let mut g = c.benchmark_group("record");
    g.throughput(Throughput::Elements(1));
    let mut scratch = Scratch::new(1);
    let mut out = Vec::new();
    g.bench_function("1KB-text", |b| {
        b.iter(|| {
            out.clear();
            rec.encode_into(0, kind, opts, &mut scratch, &mut out)
                .unwrap();
        })
    });
    g.finish();
}

criterion_group!(benches, escaping, base64, deflate, records);
criterion_main!(benches);
