//! Pools for fixed-size objects: no allocation on the hot path once warm.
//!
//! [`ObjPool`] recycles whole objects (`Box<T>`, byte buffers, request states). It grows in
//! a `#[cold]` function; after the working set has been reached once, `get`/`put` only move
//! pointers within a vector whose capacity is already there.

/// A free list of boxed objects made by `make`.
pub struct ObjPool<T> {
    free: Vec<Box<T>>,
    make: fn() -> T,
    grow_by: usize,
    allocated: usize,
}

impl<T> std::fmt::Debug for ObjPool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjPool")
            .field("free", &self.free.len())
            .field("allocated", &self.allocated)
            .finish()
    }
}

impl<T> ObjPool<T> {
    /// A pool that makes objects with `make`, `grow_by` at a time (at least one).
    pub fn new(make: fn() -> T, grow_by: usize) -> ObjPool<T> {
        ObjPool {
            free: Vec::new(),
            make,
            grow_by: grow_by.max(1),
            allocated: 0,
        }
    }

    /// Takes an object; its contents are whatever the last user left (or fresh from `make`).
    #[inline]
    pub fn get(&mut self) -> Box<T> {
        match self.free.pop() {
            Some(obj) => obj,
            None => self.grow_and_get(),
        }
    }

    /// Returns an object to the pool.
    #[inline]
    pub fn put(&mut self, obj: Box<T>) {
        // Capacity was reserved for every object this pool made, so this never reallocates.
        self.free.push(obj);
    }

    #[cold]
    #[inline(never)]
    fn grow_and_get(&mut self) -> Box<T> {
        let n = self.grow_by;
        self.allocated += n;
        self.free
            .reserve(self.allocated.saturating_sub(self.free.len()));
        for _ in 1..n {
            self.free.push(Box::new((self.make)()));
        }
        Box::new((self.make)())
    }

    /// Objects made so far (free and in use).
    pub fn allocated(&self) -> usize {
        self.allocated
    }

    /// Objects currently in the free list.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }
}

/// A pool of byte buffers of one size (bounce buffers, receive descriptors).
pub type BufPool = ObjPool<Vec<u8>>;

/// A pool of zeroed buffers of `size` bytes. `size` is fixed per pool through a closure-free
/// constructor so the pool itself stays `fn`-pointer based.
#[derive(Debug)]
pub struct FixedBufPool {
    free: Vec<Box<[u8]>>,
    size: usize,
    grow_by: usize,
    allocated: usize,
}

impl FixedBufPool {
    pub fn new(size: usize, grow_by: usize) -> FixedBufPool {
        FixedBufPool {
            free: Vec::new(),
            size,
            grow_by: grow_by.max(1),
            allocated: 0,
        }
    }

    pub fn buf_size(&self) -> usize {
        self.size
    }

    #[inline]
    pub fn get(&mut self) -> Box<[u8]> {
        match self.free.pop() {
            Some(b) => b,
            None => self.grow_and_get(),
        }
    }

    #[inline]
    pub fn put(&mut self, b: Box<[u8]>) {
        debug_assert_eq!(b.len(), self.size);
        self.free.push(b);
    }

    #[cold]
    #[inline(never)]
    fn grow_and_get(&mut self) -> Box<[u8]> {
        self.allocated += self.grow_by;
        self.free
            .reserve(self.allocated.saturating_sub(self.free.len()));
        for _ in 1..self.grow_by {
            self.free.push(vec![0u8; self.size].into_boxed_slice());
        }
        vec![0u8; self.size].into_boxed_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    struct Counting;
    thread_local! { static ALLOCS: Cell<usize> = const { Cell::new(0) }; }
    // SAFETY: forwards to the system allocator; the counter is thread-local and never
    // allocates.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
            // SAFETY: same contract as our caller's.
            unsafe { System.alloc(l) }
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            // SAFETY: same contract as our caller's.
            unsafe { System.dealloc(p, l) }
        }
    }
    #[global_allocator]
    static GLOBAL: Counting = Counting;

    fn allocs() -> usize {
        ALLOCS.with(|c| c.get())
    }

    #[test]
    fn no_allocation_once_warm() {
        let mut pool: ObjPool<[u64; 16]> = ObjPool::new(|| [0; 16], 8);
        let mut held = Vec::with_capacity(100);
        for _ in 0..100 {
            held.push(pool.get());
        }
        for o in held.drain(..) {
            pool.put(o);
        }
        let before = allocs();
        for round in 0..1000 {
            for _ in 0..100 {
                let mut o = pool.get();
                o[0] = round;
                held.push(o);
            }
            for o in held.drain(..) {
                pool.put(o);
            }
        }
        assert_eq!(allocs(), before, "warm pool allocated");
        assert_eq!(pool.free_count(), pool.allocated());
    }

    #[test]
    fn fixed_buffers_keep_their_size() {
        let mut p = FixedBufPool::new(4096, 4);
        let a = p.get();
        let b = p.get();
        assert_eq!(a.len(), 4096);
        p.put(a);
        p.put(b);
        let before = allocs();
        for _ in 0..1000 {
            let x = p.get();
            p.put(x);
        }
        assert_eq!(allocs(), before);
    }
}
