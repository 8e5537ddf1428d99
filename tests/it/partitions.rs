//! Hive partitions have one parser, `store::uri::hive_partitions`, used by
//! the Parquet source (store paths) and the DuckLake source (resolved URLs):
//! folders only, never the file name, percent-decoded. The Parquet source
//! once counted the file name and kept the encoding; these are the cases
//! where the two parsers disagreed.

use object_store::path::Path;
use parqivf::catalog::paths::object_path;
use parqivf::store::uri::hive_partitions;
use url::Url;

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_file_name_is_never_a_partition() {
    let path = Path::from("d/ext/part=1/k=v=w/file=3.parquet");
    assert_eq!(
        hive_partitions(&path),
        pairs(&[("part", "1"), ("k", "v=w")])
    );
    assert!(hive_partitions(&Path::from("date=2024.parquet")).is_empty());
}

#[test]
fn store_path_segments_are_percent_decoded() {
    // object_store encodes '%', '#', '?', … in a segment; the partition is the
    // real folder name, as the DuckLake catalog and the file system have it.
    let path = Path::from_iter(["lake", "k%x=a#b c", "n=é?", "f.parquet"]);
    assert_eq!(path.as_ref(), "lake/k%25x=a%23b c/n=%C3%A9%3F/f.parquet");
    assert_eq!(
        hive_partitions(&path),
        pairs(&[("k%x", "a#b c"), ("n", "é?")])
    );
}

#[test]
fn a_ducklake_url_and_the_same_store_path_give_the_same_partitions() {
    let url = Url::parse("file:///lake/k%25x=a%23b%20c/n=%C3%A9%3F/f.parquet").unwrap();
    let from_url = hive_partitions(&object_path(&url).unwrap());
    let from_store = hive_partitions(&Path::from_iter(["lake", "k%x=a#b c", "n=é?", "f.parquet"]));
    assert_eq!(from_url, from_store);
    assert_eq!(from_url, pairs(&[("k%x", "a#b c"), ("n", "é?")]));
}

#[test]
fn segments_without_a_name_are_not_partitions() {
    let path = Path::from("t/=v/plain/x=/f.parquet");
    assert_eq!(hive_partitions(&path), pairs(&[("x", "")]));
}
