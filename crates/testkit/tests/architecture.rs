//! docs/architecture.md's floor table is true to the code: every crate under `crates/` has a row,
//! and its floor is one more than the highest floor among its `[dependencies]` on other
//! prefixkv crates (0 with none). So no crate depends on its own floor or above, and the map
//! cannot drift from the Cargo.toml files unnoticed.

use std::collections::BTreeMap;
use std::path::Path;

/// `crate name → prefixkv crates it depends on` (normal dependencies only), from each Cargo.toml.
fn dependencies(crates: &Path) -> BTreeMap<String, Vec<String>> {
    let mut map = BTreeMap::new();
    for entry in std::fs::read_dir(crates).expect("crates/") {
        let dir = entry.expect("entry").path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let mut in_dependencies = false;
        let mut names = Vec::new();
        for line in manifest.lines() {
            if line.starts_with('[') {
                in_dependencies = line.trim() == "[dependencies]";
            } else if in_dependencies {
                if let Some(rest) = line.strip_prefix("prefixkv-") {
                    names.push(rest.split([' ', '=', '.']).next().unwrap().to_string());
                }
            }
        }
        map.insert(name, names);
    }
    map
}

fn floor(
    name: &str,
    deps: &BTreeMap<String, Vec<String>>,
    memo: &mut BTreeMap<String, usize>,
) -> usize {
    if let Some(&floor) = memo.get(name) {
        return floor;
    }
    let below = deps[name]
        .iter()
        .map(|dep| floor(dep, deps, memo) + 1)
        .max()
        .unwrap_or(0);
    memo.insert(name.to_string(), below);
    below
}

/// `crate → floor` from the rows `| N | \`crate\` | …` of the doc's table.
fn documented(doc: &str) -> BTreeMap<String, usize> {
    doc.lines()
        .filter_map(|line| {
            let mut cells = line.split('|').map(str::trim).skip(1);
            let floor = cells.next()?.parse().ok()?;
            let name = cells.next()?.strip_prefix('`')?.strip_suffix('`')?;
            Some((name.to_string(), floor))
        })
        .collect()
}

#[test]
fn the_floor_table_matches_the_cargo_manifests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let deps = dependencies(&root.join("crates"));
    let doc =
        std::fs::read_to_string(root.join("docs/architecture.md")).expect("docs/architecture.md");
    let table = documented(&doc);
    let mut memo = BTreeMap::new();
    let mut wrong = Vec::new();
    for name in deps.keys() {
        let actual = floor(name, &deps, &mut memo);
        match table.get(name) {
            Some(&written) if written == actual => {}
            Some(&written) => wrong.push(format!(
                "{name}: the doc says floor {written}, its dependencies make it {actual}"
            )),
            None => wrong.push(format!("{name}: no row in docs/architecture.md")),
        }
    }
    for name in table.keys() {
        if !deps.contains_key(name) {
            wrong.push(format!(
                "{name}: a row in docs/architecture.md, but no crates/{name}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/architecture.md is out of date:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn a_wrong_row_is_caught() {
    // The check can fail: a table that puts `store` on floor 0 disagrees with its manifest.
    let table = documented("| 0 | `store` | the store |\n| 2 | `engine` | x |");
    assert_eq!(table.get("store"), Some(&0));
    assert_eq!(table.get("engine"), Some(&2));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let deps = dependencies(&root.join("crates"));
    let mut memo = BTreeMap::new();
    assert_ne!(floor("store", &deps, &mut memo), 0);
}
