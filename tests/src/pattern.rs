//! Test messages that carry their own check: `[seq u32][len u32][len bytes of pattern]`.

/// The byte at `i` of message `seq`.
#[inline]
pub fn byte(seq: u32, i: usize) -> u8 {
    (seq.wrapping_mul(31) as usize).wrapping_add(i.wrapping_mul(7)) as u8 ^ 0x5a
}

/// Writes message `seq` of `total` bytes (at least 8) into `buf`; returns `total`.
pub fn fill(buf: &mut [u8], seq: u32, total: usize) -> usize {
    assert!(total >= 8 && buf.len() >= total);
    buf[..4].copy_from_slice(&seq.to_le_bytes());
    buf[4..8].copy_from_slice(&((total - 8) as u32).to_le_bytes());
    for (i, b) in buf[8..total].iter_mut().enumerate() {
        *b = byte(seq, i);
    }
    total
}

pub fn make(seq: u32, total: usize) -> Vec<u8> {
    let mut v = vec![0u8; total];
    fill(&mut v, seq, total);
    v
}

/// Checks a received message; returns its seq.
pub fn check(data: &[u8]) -> Result<u32, String> {
    if data.len() < 8 {
        return Err(format!(
            "message of {} bytes is shorter than its header",
            data.len()
        ));
    }
    let seq = u32::from_le_bytes(data[..4].try_into().unwrap());
    let len = u32::from_le_bytes(data[4..8].try_into().unwrap()) as usize;
    if len != data.len() - 8 {
        return Err(format!(
            "seq {seq}: header says {len} bytes, got {}",
            data.len() - 8
        ));
    }
    if let Some(i) = data[8..]
        .iter()
        .enumerate()
        .position(|(i, &b)| b != byte(seq, i))
    {
        return Err(format!("seq {seq} len {len}: byte {i} differs"));
    }
    Ok(seq)
}

/// Region contents for RMA checks: byte `i` of a region filled with `seed`.
#[inline]
pub fn region_byte(seed: u32, i: usize) -> u8 {
    (i.wrapping_mul(13) as u32 ^ seed.wrapping_mul(0x9e37_79b9)).to_le_bytes()[0] ^ (i >> 8) as u8
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip() {
        let m = super::make(7, 100);
        assert_eq!(super::check(&m), Ok(7));
        let mut bad = m.clone();
        bad[50] ^= 1;
        assert!(super::check(&bad).is_err());
        assert!(super::check(&m[..99]).is_err());
    }
}
