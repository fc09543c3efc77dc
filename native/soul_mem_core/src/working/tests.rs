//! Unit tests of the private long-term index and of the configuration.

use super::index::VectorRow;
use super::*;

fn mid(i: u128) -> MemoryId {
    MemoryId(uuid::Uuid::from_u128(i))
}

fn put(ix: &mut LongTermIndex, id: MemoryId, hash: [u8; 32], v: &[f32]) -> Result<()> {
    ix.upsert_rows(&[(id, hash, v.to_vec())])
}

#[test]
fn index_top_k_and_swap_remove() -> Result<()> {
    let mut ix = LongTermIndex::new(2);
    put(&mut ix, mid(1), [1; 32], &[1.0, 0.0])?;
    put(&mut ix, mid(2), [2; 32], &[0.7, 0.7])?;
    put(&mut ix, mid(3), [3; 32], &[0.0, 2.0])?;
    let q = [1.0 / 2f32.sqrt(), 1.0 / 2f32.sqrt()];
    let top = ix.top_k(&[&q], 2, None)?.remove(0);
    assert_eq!(top.len(), 2);
    assert_eq!(top[0].0, mid(2));
    assert!(ix.remove(&mid(1)));
    assert_eq!(ix.len(), 2);
    assert_eq!(ix.top_k(&[&[0.0, 1.0]], 1, None)?[0][0].0, mid(3));
    assert_eq!(ix.hash_of(&mid(3)), Some(&[3; 32]));
    assert!(put(&mut ix, mid(4), [0; 32], &[1.0]).is_err());
    put(&mut ix, mid(2), [9; 32], &[0.0, 0.0])?;
    assert_eq!(ix.len(), 1, "a zero vector removes the row");
    Ok(())
}

/// Remembered lists equal a fresh scan's, for repeated and new queries mixed, and a changed
/// row (replaced, added or removed) is seen by the next question: nothing stale is answered.
#[test]
fn remembered_lists_are_a_scans_and_forgotten_when_a_row_changes() -> Result<()> {
    let mut ix = LongTermIndex::new(2);
    put(&mut ix, mid(1), [1; 32], &[1.0, 0.0])?;
    put(&mut ix, mid(2), [2; 32], &[0.6, 0.8])?;
    put(&mut ix, mid(3), [3; 32], &[0.0, 1.0])?;
    let (a, b) = ([1.0f32, 0.0], [0.0f32, 1.0]);
    let first = ix.top_k_remembered(&[&a], 2, None)?;
    assert_eq!(first, ix.top_k(&[&a], 2, None)?);
    // `a` remembered, `b` scanned; another k or floor is another question.
    let both = ix.top_k_remembered(&[&b, &a], 2, None)?;
    assert_eq!(both, ix.top_k(&[&b, &a], 2, None)?);
    assert_eq!(
        ix.top_k_remembered(&[&a], 1, Some(0.9))?,
        ix.top_k(&[&a], 1, Some(0.9))?
    );
    // A new row nearer to `c` than any: the next answer has it first.
    let c = [1.0 / 2f32.sqrt(), 1.0 / 2f32.sqrt()];
    assert_eq!(ix.top_k_remembered(&[&c], 2, None)?[0][0].0, mid(2));
    put(&mut ix, mid(4), [4; 32], &c)?;
    assert_eq!(ix.top_k_remembered(&[&c], 2, None)?[0][0].0, mid(4));
    // A replaced row: mid(4) turned towards `b`.
    put(&mut ix, mid(4), [5; 32], &[0.01, 0.99])?;
    assert_eq!(ix.top_k_remembered(&[&c], 2, None)?[0][0].0, mid(2));
    assert_eq!(ix.top_k_remembered(&[&b], 1, None)?[0][0].0, mid(3));
    // A removed row is gone from the remembered answer.
    assert!(ix.remove(&mid(3)));
    assert_eq!(ix.top_k_remembered(&[&b], 1, None)?[0][0].0, mid(4));
    for q in [&a, &b, &c] {
        assert_eq!(
            ix.top_k_remembered(&[q], 3, None)?,
            ix.top_k(&[q], 3, None)?
        );
    }
    Ok(())
}

/// Several queries in one pass give each exactly its own top k (scores to the bit), a query
/// of another dimension nothing, and the floor applies to each.
#[test]
fn index_top_k_of_several_queries_equals_one_at_a_time() -> Result<()> {
    let mut rng = crate::rng::SplitMix64::new(11);
    let dim = 48;
    let mut ix = LongTermIndex::new(dim);
    let mut random = || -> Vec<f32> { (0..dim).map(|_| rng.next_f64() as f32 - 0.5).collect() };
    for i in 0..500 {
        put(&mut ix, mid(i), [0; 32], &random())?;
    }
    let queries: Vec<Vec<f32>> = (0..4)
        .map(|_| {
            let v = random();
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter().map(|x| x / n).collect()
        })
        .collect();
    let short = vec![1.0f32; dim - 1];
    let mut refs: Vec<&[f32]> = queries.iter().map(Vec::as_slice).collect();
    refs.insert(2, &short);
    for floor in [None, Some(0.1)] {
        let together = ix.top_k(&refs, 7, floor)?;
        assert_eq!(together.len(), refs.len());
        assert!(
            together[2].is_empty(),
            "a query of another dimension finds nothing"
        );
        for (p, q) in refs.iter().enumerate() {
            assert_eq!(together[p], ix.top_k(&[q], 7, floor)?[0], "query {p}");
            assert!(floor.is_none_or(|f| together[p].iter().all(|(_, s)| *s >= f)));
        }
        assert_eq!(together[0].len(), 7);
    }
    Ok(())
}

fn unit(rng: &mut crate::rng::SplitMix64, dim: usize) -> Vec<f32> {
    let v: Vec<f32> = (0..dim).map(|_| rng.next_f64() as f32 - 0.5).collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / n).collect()
}

/// Share of the exact (f32) top `k` of `rows` that an index's candidates for the seeds — its
/// top `k · RERANK_OVERSAMPLE`, re-scored exactly afterwards — contain, over `queries`.
fn candidate_recall(
    ix: &LongTermIndex,
    rows: &std::collections::HashMap<MemoryId, Vec<f32>>,
    queries: &[Vec<f32>],
    k: usize,
) -> f64 {
    let (mut hit, mut all) = (0, 0);
    for q in queries {
        let mut exact: Vec<(f32, MemoryId)> = rows
            .iter()
            .map(|(id, v)| (crate::retrieval::dot::dot(v, q), *id))
            .collect();
        exact.sort_by(|a, b| b.0.total_cmp(&a.0));
        exact.truncate(k);
        let got = ix
            .top_k(&[q], k * super::activate::RERANK_OVERSAMPLE, None)
            .unwrap()
            .remove(0);
        all += exact.len();
        hit += exact
            .iter()
            .filter(|(_, id)| got.iter().any(|(g, _)| g == id))
            .count();
    }
    hit as f64 / all.max(1) as f64
}

/// The HNSW index finds the candidates the scan finds (the exact top 10 among its top 40,
/// ≥ 0.97 on random rows, where an HNSW is at its weakest; the scan's is 1) through inserts,
/// replacements and swap-removes; removed rows never come back, and every slot stays where
/// the id list says.
#[test]
fn hnsw_index_follows_the_scan_through_changes() -> Result<()> {
    let mut rng = crate::rng::SplitMix64::new(5);
    let dim = 32;
    let mut scan = LongTermIndex::new(dim);
    let mut graph = LongTermIndex::new_graph(dim, 16)?;
    assert_eq!(graph.kind(), IndexKind::Hnsw);
    let mut live = std::collections::HashMap::new();
    fn upsert(
        rows: Vec<VectorRow>,
        indexes: [&mut LongTermIndex; 2],
        live: &mut std::collections::HashMap<MemoryId, Vec<f32>>,
    ) -> Result<Vec<VectorRow>> {
        for (id, _, v) in &rows {
            live.insert(*id, v.clone());
        }
        for ix in indexes {
            ix.upsert_rows(&rows)?;
        }
        Ok(rows)
    }
    upsert(
        (0..3000)
            .map(|i| (mid(i), [1; 32], unit(&mut rng, dim)))
            .collect(),
        [&mut scan, &mut graph],
        &mut live,
    )?;
    let queries: Vec<Vec<f32>> = (0..60).map(|_| unit(&mut rng, dim)).collect();
    let first = candidate_recall(&graph, &live, &queries, 10);
    assert!(first >= 0.97, "recall@10 {first}");
    assert_eq!(candidate_recall(&scan, &live, &queries, 10), 1.0);

    // Replace 300 rows, remove 500 (with swap-removes moving the last slots), add 200.
    let replaced = upsert(
        (0..300)
            .map(|i| (mid(i * 7), [2; 32], unit(&mut rng, dim)))
            .collect(),
        [&mut scan, &mut graph],
        &mut live,
    )?;
    for i in (0..3000).step_by(6) {
        live.remove(&mid(i));
        assert_eq!(scan.remove(&mid(i)), graph.remove(&mid(i)));
    }
    let added = upsert(
        (5000..5200)
            .map(|i| (mid(i), [3; 32], unit(&mut rng, dim)))
            .collect(),
        [&mut scan, &mut graph],
        &mut live,
    )?;
    assert_eq!((scan.len(), graph.len()), (live.len(), live.len()));
    let after = candidate_recall(&graph, &live, &queries, 10);
    assert!(after >= 0.97, "recall@10 after changes {after}");
    assert_eq!(candidate_recall(&scan, &live, &queries, 10), 1.0);
    for q in &queries {
        for (id, _) in graph.top_k(&[q], 20, None)?.remove(0) {
            assert!(graph.hash_of(&id).is_some(), "a removed row came back");
        }
    }
    // A row's own vector finds it first: slots and ids agree after the renames.
    for (id, _, v) in added
        .iter()
        .chain(&replaced)
        .filter(|(id, _, _)| graph.hash_of(id).is_some())
    {
        assert_eq!(graph.top_k(&[v], 1, None)?[0][0].0, *id);
    }
    assert!(graph.save_due());
    assert!(!scan.save_due(), "a scan index is never saved");
    Ok(())
}

/// The saved graph reads back with the same rows and answers; a damaged, foreign or missing
/// manifest reads as nothing; removing the files leaves none behind.
#[test]
fn saved_hnsw_index_reads_back_and_refuses_damage() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("soulmem-ann-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = dir.join("c.db");
    let mut rng = crate::rng::SplitMix64::new(9);
    let dim = 24;
    let mut graph = LongTermIndex::new_graph(dim, 16)?;
    let rows: Vec<VectorRow> = (0..500)
        .map(|i| (mid(i), [i as u8; 32], unit(&mut rng, dim)))
        .collect();
    graph.upsert_rows(&rows)?;
    graph.remove(&mid(3));
    graph.save(&store, "m")?;
    assert!(!graph.save_due());
    graph.save(&store, "m")?; // a second generation replaces the first
    let files = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(files().len(), 2, "{:?}", files());

    let saved = ann_file::load(&store, "m", dim).expect("reads back");
    let back = LongTermIndex::from_saved(dim, saved.ann, saved.rows);
    assert_eq!(
        back.slots().collect::<Vec<_>>(),
        graph.slots().collect::<Vec<_>>()
    );
    let queries: Vec<Vec<f32>> = (0..20).map(|_| unit(&mut rng, dim)).collect();
    for q in &queries {
        assert_eq!(back.top_k(&[q], 10, None)?, graph.top_k(&[q], 10, None)?);
    }
    assert!(ann_file::load(&store, "other model", dim).is_none());
    assert!(ann_file::load(&store, "m", dim + 1).is_none());

    let manifest = ann_file::manifest_path(&store);
    let mut bytes = std::fs::read(&manifest).unwrap();
    let good = bytes.clone();
    let at = bytes.len() / 2;
    bytes[at] ^= 1;
    std::fs::write(&manifest, &bytes).unwrap();
    assert!(
        ann_file::load(&store, "m", dim).is_none(),
        "a flipped bit is caught"
    );
    std::fs::write(&manifest, &good[..good.len() - 1]).unwrap();
    assert!(
        ann_file::load(&store, "m", dim).is_none(),
        "a short file is caught"
    );
    std::fs::write(&manifest, &good).unwrap();
    assert!(ann_file::load(&store, "m", dim).is_some());

    ann_file::remove_files(&store)?;
    assert!(files().is_empty(), "{:?}", files());
    assert!(ann_file::load(&store, "m", dim).is_none());
    std::fs::remove_dir_all(&dir).unwrap();
    Ok(())
}

#[test]
fn config_validation() {
    assert!(WorkingConfig::default().validate().is_ok());
    let bad = WorkingConfig {
        cap: 0,
        ..WorkingConfig::default()
    };
    assert!(bad.validate().is_err());
    let bad = WorkingConfig {
        activation_budget: 0,
        ..WorkingConfig::default()
    };
    assert!(bad.validate().is_err());
    let bad = WorkingConfig {
        min_score: Some(f32::NAN),
        ..WorkingConfig::default()
    };
    assert!(bad.validate().is_err());
}

/// A note's pending links come out sorted by link id whatever the order of the graph's
/// pending map (seeded at random per process): working memory's release writes them back in
/// this order, and the store keeps a note's links in order.
#[test]
fn pending_links_come_out_in_link_id_order() {
    use crate::graph::tests::{link, sem};
    let mut g = crate::graph::MemoryGraph::new("c");
    let mut from = sem("c", "from");
    for i in 0..12 {
        let l = link(&from, sem("c", &format!("absent{i}")).id);
        from.links.push(l);
    }
    let mut ids: Vec<crate::model::LinkId> = from.links.iter().map(|l| l.id).collect();
    ids.sort();
    let from_id = from.id;
    g.insert(from).unwrap();
    let pending = crate::store::pending_by_source(&g, |_| true);
    let got: Vec<crate::model::LinkId> = pending[&from_id].iter().map(|l| l.id).collect();
    assert_eq!(got, ids);
}

mod stored_links {
    use super::super::links::StoredLinks;
    use crate::graph::tests::{link, sem};
    use crate::model::*;
    use crate::rng::SplitMix64;
    use crate::store::{Change, NeighbourSource, Store};

    const C: &str = "c";

    fn note(i: usize) -> MemoryNote {
        sem(C, &format!("n{i}"))
    }

    /// Random links among `n` notes, with self-links, parallel links, equal weights and links
    /// to notes never stored.
    fn random_notes(rng: &mut SplitMix64, n: usize) -> Vec<MemoryNote> {
        let mut notes: Vec<MemoryNote> = (0..n).map(note).collect();
        for i in 0..n {
            for _ in 0..(rng.next_u64() % 5) {
                let j = (rng.next_u64() % (n as u64 + 3)) as usize;
                let to = if j < n {
                    notes[j].id
                } else {
                    note(1000 + j).id
                };
                let w = [0.3, 0.5, 0.5, 1.0][(rng.next_u64() % 4) as usize];
                let mut l = link(&notes[i], to);
                l.intensity = w;
                l.link_type = match rng.next_u64() % 4 {
                    0 => MemoryLinkType::Proc(ProcMemLink::TrigToAction { prob: w / 2.0 }),
                    1 => MemoryLinkType::Situation(SituationMemLink::SpecificToAbstract {}),
                    2 => MemoryLinkType::Sem(SemMemLink {
                        verb: format!("v{}", rng.next_u64() % 3),
                        confidence: w as f32,
                    }),
                    _ => l.link_type,
                };
                notes[i].links.push(l);
            }
        }
        notes
    }

    fn same_as_store(links: &StoredLinks, store: &Store, n: usize) {
        let ids: Vec<MemoryId> = (0..n + 3).map(|i| note(i).id).collect();
        assert_eq!(
            links.neighbour_lists(&ids).unwrap(),
            store.neighbour_lists(&ids).unwrap()
        );
        assert_eq!(
            links.active_of(&ids).unwrap(),
            NeighbourSource::active_of(store, &ids).unwrap()
        );
        // Whole links, in the store's order: what an activation gives the notes it loads.
        let from_memory = links.links_from(&ids).unwrap();
        assert_eq!(
            from_memory,
            NeighbourSource::links_from(store, &ids).unwrap()
        );
        assert!(from_memory.values().map(Vec::len).sum::<usize>() > n);
        assert_eq!(
            store.notes_linked_by(&ids, links).unwrap(),
            store.notes_of(&ids).unwrap()
        );
    }

    #[test]
    fn lists_equal_the_stores_and_follow_working_memorys_writes() {
        let dir = std::env::temp_dir().join(format!("soulmem-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut store = Store::open_in(&dir, C).unwrap();
        let mut rng = SplitMix64::new(7);
        let n = 40;
        let notes = random_notes(&mut rng, n);
        store.upsert_notes(&notes, &[]).unwrap();
        store.archive_note(&notes[3].id).unwrap();
        let mut links = StoredLinks::load(&store).unwrap();
        assert!(links.is_current(&store));
        same_as_store(&links, &store, n);

        // Working memory's own writes are applied in place and keep the lists current.
        let mut again = random_notes(&mut rng, n);
        again.truncate(10);
        let extra = vec![
            Change::ArchiveNote(notes[12].id),
            Change::DeleteNote(notes[20].id),
            Change::PutNote(note(n + 1)),
        ];
        let before = store.sync_tag();
        store.upsert_notes(&again, &extra).unwrap();
        links.wrote(&store, before, &again, &extra);
        assert!(links.is_current(&store));
        same_as_store(&links, &store, n);

        // Another writer makes them stale; a reload catches up.
        store.delete_note(&notes[5].id).unwrap();
        assert!(!links.is_current(&store));
        let before = store.sync_tag();
        let stale_write = vec![note(7)];
        store.upsert_notes(&stale_write, &[]).unwrap();
        links.wrote(&store, before, &stale_write, &[]);
        assert!(
            !links.is_current(&store),
            "a missed write is never papered over"
        );
        let links = StoredLinks::load(&store).unwrap();
        same_as_store(&links, &store, n);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
