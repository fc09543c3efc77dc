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
    let top = ix.top_k(&q, 2, None);
    assert_eq!(top.len(), 2);
    assert_eq!(top[0].0, mid(2));
    assert!(ix.remove(&mid(1)));
    assert_eq!(ix.len(), 2);
    assert_eq!(ix.top_k(&[0.0, 1.0], 1, None)[0].0, mid(3));
    assert_eq!(ix.hash_of(&mid(3)), Some(&[3; 32]));
    assert!(ix.upsert(mid(4), [0; 32], &[1.0]).is_err());
    ix.upsert(mid(2), [9; 32], &[0.0, 0.0])?;
    assert_eq!(ix.len(), 1, "a zero vector removes the row");
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
