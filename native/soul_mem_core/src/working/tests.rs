//! Unit tests of the private long-term index and of the configuration.

use super::*;

fn mid(i: u128) -> MemoryId {
    MemoryId(uuid::Uuid::from_u128(i))
}

#[test]
fn index_top_k_and_swap_remove() -> Result<()> {
    let mut ix = LongTermIndex::new(2);
    ix.upsert(mid(1), [1; 32], &[1.0, 0.0])?;
    ix.upsert(mid(2), [2; 32], &[0.7, 0.7])?;
    ix.upsert(mid(3), [3; 32], &[0.0, 2.0])?;
    let q = [1.0 / 2f32.sqrt(), 1.0 / 2f32.sqrt()];
    let top = ix.top_k(&[&q], 2, None).remove(0);
    assert_eq!(top.len(), 2);
    assert_eq!(top[0].0, mid(2));
    assert!(ix.remove(&mid(1)));
    assert_eq!(ix.len(), 2);
    assert_eq!(ix.top_k(&[&[0.0, 1.0]], 1, None)[0][0].0, mid(3));
    assert_eq!(ix.hash_of(&mid(3)), Some(&[3; 32]));
    assert!(ix.upsert(mid(4), [0; 32], &[1.0]).is_err());
    ix.upsert(mid(2), [9; 32], &[0.0, 0.0])?;
    assert_eq!(ix.len(), 1, "a zero vector removes the row");
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
        ix.upsert(mid(i), [0; 32], &random())?;
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
        let together = ix.top_k(&refs, 7, floor);
        assert_eq!(together.len(), refs.len());
        assert!(
            together[2].is_empty(),
            "a query of another dimension finds nothing"
        );
        for (p, q) in refs.iter().enumerate() {
            assert_eq!(together[p], ix.top_k(&[q], 7, floor)[0], "query {p}");
            assert!(floor.is_none_or(|f| together[p].iter().all(|(_, s)| *s >= f)));
        }
        assert_eq!(together[0].len(), 7);
    }
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
        min_score: Some(f32::NAN),
        ..WorkingConfig::default()
    };
    assert!(bad.validate().is_err());
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
