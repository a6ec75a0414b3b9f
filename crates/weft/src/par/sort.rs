//! The parallel sorts behind [`ParallelSliceMut`](super::ParallelSliceMut).
//!
//! Both sorts first check, sequentially, whether the slice is already sorted or strictly
//! descending (usually settled within a few comparisons on other inputs), and finish in
//! linear time if so.
//!
//! **Stable: parallel merge sort.** A buffer as long as the slice is allocated. The
//! recursion `sort_into` sorts both halves with `join`, each half leaving its result in
//! the array the merge reads from, then merges the two runs into the other array, so
//! that the data alternates between the slice and the buffer from one level to the next
//! and the top level ends in the slice. The leaves (at most 2 MiB of elements, at least
//! eight per worker, an even number of levels below the top: `leaf_for`) are sorted in
//! place with `slice::sort_by` (stable). Two runs that are already in order (or in
//! strictly reverse order) are just copied. A sequential merge works from both ends at
//! once (`merge_sequential`), which makes a level of merging cheaper per element than
//! the sequential sort's own upper levels. A merge larger than
//! `MERGE_SEQUENTIAL` is itself split: the middle element of the longer run is located
//! in the shorter run by binary search, which cuts both runs into a part that goes
//! before and a part that goes after, and the two smaller merges run with `join`.
//!
//! **Unstable: parallel quicksort.** Partition sequentially around a pivot (median of
//! three, or of three medians of three for larger pieces), then sort both sides with
//! `join`. Pieces of at most `QUICKSORT_LEAF` elements, and pieces reached after too
//! many levels (so that adversarial inputs stay `O(n log n)`), go to
//! `slice::sort_unstable_by`. The partition (a branch-free Lomuto partition) only
//! swaps, in safe code. As in pdqsort, a piece whose pivot equals the pivot bounding it
//! on the left (so that many elements are equal) first moves the elements equal to the
//! pivot to the front, where they are final, and sorts only the rest: many duplicates
//! cost no extra levels.
//!
//! **Panics in the comparison.** While merging, every element has exactly one live copy,
//! in the slice or in the buffer; the other copies are stale bits that are never dropped
//! or read as values (the buffer is a `Vec` of length 0, so it never drops anything).
//! When a comparison panics, the code on the unwinding path moves every live element
//! of the interrupted step to where its caller expects it, and `join` runs both halves
//! to completion before it propagates a panic, so when the panic reaches the caller of
//! `par_sort` the slice holds every element exactly once, in some order.
//!
//! (Over 600 lines with its unit tests; the code is under 600.)

use std::cmp::Ordering;
use std::mem::{self, MaybeUninit};
use std::panic::{self, AssertUnwindSafe};
use std::ptr;

use crate::forkjoin::{self, join};

/// The merge sort's leaves have at least this many elements (so slices of fewer than
/// twice as many are sorted sequentially).
const MERGESORT_LEAF: usize = 4096;
/// Leaves of the merge sort per worker, at least: room for stealing to even out a
/// worker that runs late.
const LEAVES_PER_WORKER: usize = 8;
/// Bytes of elements in a merge sort leaf, at most (before the rounding in `leaf_for`).
const LEAF_BYTES: usize = 2 << 20;
/// Merges of at most this many elements in all run sequentially.
const MERGE_SEQUENTIAL: usize = 8192;
/// Pieces of at most this many elements are sorted sequentially by the quicksort.
const QUICKSORT_LEAF: usize = 4096;

/// Stable parallel sort of `v` by `compare`.
pub(super) fn par_mergesort<T, F>(v: &mut [T], compare: &F)
where
    T: Send,
    F: Fn(&T, &T) -> Ordering + Sync,
{
    mergesort_with(v, compare, mergesort_leaf::<T>(v.len()), MERGE_SEQUENTIAL);
}

/// The leaf size of the merge sort of `len` elements of `T` on the workers `join`
/// spreads to.
fn mergesort_leaf<T>(len: usize) -> usize {
    leaf_for(len, mem::size_of::<T>(), forkjoin::current_num_threads())
}

/// The leaf size of the merge sort of `len` elements of `size` bytes over `workers`
/// workers.
///
/// Leaves of at most `LEAF_BYTES`, and at least `LEAVES_PER_WORKER` per worker. The
/// sequential sort of a large leaf spends more per element than a merge level does
/// here (one pass of the two-ended merge): sorting 10M `u64` in 2, 4, ..., 64 pieces
/// instead of one, on one core, saved 30-45 ms a halving down to 16 pieces (5 MB each)
/// and 10-20 ms over the two halvings to 64, while a merge level costs some 19 ms. On
/// the 16-core machine, 2 workers sorted 10M `u64` in 160-212 ms with 64 leaves against
/// 270-322 ms with 4, and 16 workers in 48-52 ms with 256 leaves against 62-65 with 64
/// (rayon: 76-80).
///
/// The depth, log2 of the number of leaves, is made even (rounded up, or down where up
/// would make leaves shorter than `MERGESORT_LEAF`): the data moves between the slice
/// and the buffer at every level, so at an odd depth the leaves would be sorted in
/// place and then copied into the buffer, one more pass.
fn leaf_for(len: usize, size: usize, workers: usize) -> usize {
    let by_size = len.saturating_mul(size) / LEAF_BYTES;
    let by_workers = workers.max(1).saturating_mul(LEAVES_PER_WORKER);
    let wanted = by_size.max(by_workers).next_power_of_two().trailing_zeros();
    // Leaves of at least `MERGESORT_LEAF` elements: at most `max_depth` levels.
    let max_depth = (len / MERGESORT_LEAF).checked_ilog2().unwrap_or(0);
    let mut depth = wanted.min(max_depth);
    if depth % 2 == 1 {
        depth = if depth < max_depth {
            depth + 1
        } else {
            depth - 1
        };
    }
    // Each level of the recursion cuts a piece into `n / 2` and `n - n / 2` elements, so
    // after `depth` levels the longest piece has exactly `len / 2^depth` elements
    // rounded up: with that as the leaf, the recursion stops there.
    len.div_ceil(1 << depth)
}

/// Unstable parallel sort of `v` by `compare`.
pub(super) fn par_quicksort<T, F>(v: &mut [T], compare: &F)
where
    T: Send,
    F: Fn(&T, &T) -> Ordering + Sync,
{
    quicksort_with(v, compare, QUICKSORT_LEAF);
}

/// The cut-off sizes of the merge sort, passed down the recursion.
#[derive(Clone, Copy)]
struct MergeParams {
    leaf: usize,
    sequential_merge: usize,
}

fn mergesort_with<T, F>(v: &mut [T], compare: &F, leaf: usize, sequential_merge: usize)
where
    T: Send,
    F: Fn(&T, &T) -> Ordering + Sync,
{
    let params = MergeParams {
        leaf: leaf.max(1),
        // At least 2, so that a parallel merge always cuts both sides into non-empty
        // parts (see `par_merge`).
        sequential_merge: sequential_merge.max(2),
    };
    let len = v.len();
    if len <= params.leaf || mem::size_of::<T>() == 0 {
        v.sort_by(compare);
        return;
    }
    if presorted(v, compare) {
        return;
    }
    // The buffer never has a non-zero length, so it never drops an element; it only
    // provides `len` slots of scratch space and frees them at the end.
    let mut buf: Vec<T> = Vec::with_capacity(len);
    let scratch = &mut buf.spare_capacity_mut()[..len];
    // Viewing the initialized slice as possibly uninitialized only lets the sort move
    // elements out through it; the contract of `sort_into` (result in `v`, since
    // `into_buf` is false) guarantees that when it returns or unwinds every slot of `v`
    // holds an element again, each of the original elements exactly once.
    // SAFETY: `MaybeUninit<T>` has the layout of `T` (and see above).
    let slots = unsafe { &mut *(v as *mut [T] as *mut [MaybeUninit<T>]) };
    // SAFETY: every slot of `slots` is initialized (it was a `&mut [T]`), the elements
    // are lent to the sort for the duration of the call, and `scratch` is as long as
    // `slots` and a separate allocation.
    unsafe { sort_into(slots, scratch, false, compare, params) };
}

/// Sorts the elements in `v`, leaving the result in `buf` if `into_buf`, else in `v`.
///
/// # Safety
///
/// - `v.len() == buf.len()`.
/// - Every slot of `v` holds an initialized `T`; the caller hands these elements over
///   to this call and treats the slots of both `v` and `buf` as holding no live value
///   until the call ends. The prior contents of `buf` are ignored (overwritten without
///   being dropped).
///
/// When the call returns, and also when it unwinds, the destination (`buf` if
/// `into_buf`, else `v`) holds every one of the elements exactly once (sorted, on
/// return), and the slots of the other array hold no live value.
unsafe fn sort_into<T, F>(
    v: &mut [MaybeUninit<T>],
    buf: &mut [MaybeUninit<T>],
    into_buf: bool,
    compare: &F,
    params: MergeParams,
) where
    T: Send,
    F: Fn(&T, &T) -> Ordering + Sync,
{
    let len = v.len();
    debug_assert_eq!(len, buf.len());

    if len <= params.leaf {
        // SAFETY: every slot of `v` is initialized (contract); the reference ends before
        // `v` is used again.
        let init = unsafe { assume_init_slice_mut(v) };
        let sorted = panic::catch_unwind(AssertUnwindSafe(|| init.sort_by(compare)));
        // Whether or not the sort panicked, `v` holds every element once (the standard
        // sort guarantees a permutation when the comparison panics).
        if into_buf {
            // SAFETY: `v`'s slots are initialized and owned by this call, `buf` is as
            // long and disjoint; after the move the live values are in `buf` only.
            unsafe { move_slots(v, buf) };
        }
        if let Err(payload) = sorted {
            panic::resume_unwind(payload);
        }
        return;
    }

    let mid = len / 2;
    // The halves leave their results in `src`, the array this level merges from: the
    // opposite of where this level's own result goes.
    let halves = panic::catch_unwind(AssertUnwindSafe(|| {
        let (v_left, v_right) = v.split_at_mut(mid);
        let (buf_left, buf_right) = buf.split_at_mut(mid);
        join(
            // SAFETY: each half passes on the contract for its own disjoint halves of
            // `v` and `buf`, which have equal lengths.
            || unsafe { sort_into(v_left, buf_left, !into_buf, compare, params) },
            // SAFETY: as above.
            || unsafe { sort_into(v_right, buf_right, !into_buf, compare, params) },
        )
    }));
    let (src, dest) = if into_buf { (v, buf) } else { (buf, v) };
    if let Err(payload) = halves {
        // `join` let both halves finish, and each left all its elements in its part of
        // `src` (their contract holds on unwinding too). Move them to the destination.
        // SAFETY: every slot of `src` is initialized and owned by this call; `dest` is
        // as long and disjoint.
        unsafe { move_slots(src, dest) };
        panic::resume_unwind(payload);
    }
    let (src_left, src_right) = src.split_at_mut(mid);
    // SAFETY: both runs are initialized and owned by this call, and `dest` has exactly
    // their combined length and is disjoint from them.
    unsafe { par_merge(src_left, src_right, dest, compare, params) };
}

/// Merges the sorted runs `left` and `right` into `dest`, stably (on equal elements,
/// those of `left` come first).
///
/// # Safety
///
/// - `dest.len() == left.len() + right.len()`, and `dest` does not overlap either run.
/// - Every slot of `left` and `right` holds an initialized `T` handed over to this call;
///   the prior contents of `dest` are ignored (overwritten without being dropped).
///
/// When the call returns, and also when it unwinds, `dest` holds every element of both
/// runs exactly once and the slots of `left` and `right` hold no live value.
unsafe fn par_merge<T, F>(
    left: &mut [MaybeUninit<T>],
    right: &mut [MaybeUninit<T>],
    dest: &mut [MaybeUninit<T>],
    compare: &F,
    params: MergeParams,
) where
    T: Send,
    F: Fn(&T, &T) -> Ordering + Sync,
{
    debug_assert_eq!(dest.len(), left.len() + right.len());

    /// What to do, decided before anything is moved.
    enum Plan {
        /// The runs are already in order (or one is empty): copy `left`, then `right`.
        LeftThenRight,
        /// Every element of `right` is less than every element of `left`.
        RightThenLeft,
        /// Small enough to merge sequentially.
        Sequential,
        /// Merge `left[..lm]` with `right[..rm]`, and the rest with the rest.
        Split(usize, usize),
    }

    let plan = panic::catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: both runs are initialized (contract); the references end with this
        // closure, before the runs are used again.
        let (l, r) = unsafe { (assume_init_slice(left), assume_init_slice(right)) };
        let (Some(l_first), Some(l_last), Some(r_first), Some(r_last)) =
            (l.first(), l.last(), r.first(), r.last())
        else {
            return Plan::LeftThenRight;
        };
        if compare(r_first, l_last) != Ordering::Less {
            // Sorted (or sorted runs of a sorted input): equal elements already have
            // `left`'s first.
            return Plan::LeftThenRight;
        }
        if compare(r_last, l_first) == Ordering::Less {
            // Strictly less, so that no equal elements change order.
            return Plan::RightThenLeft;
        }
        if dest.len() <= params.sequential_merge {
            return Plan::Sequential;
        }
        // Cut both runs so that everything in the first parts goes before everything
        // in the second parts, keeping equal elements of `left` before those of
        // `right`.
        if l.len() >= r.len() {
            // Pivot: the middle of `left`. Elements of `right` strictly less than it go
            // first; equal ones go after it, as stability requires.
            let lm = l.len() / 2;
            let pivot = &l[lm];
            let rm = r.partition_point(|x| compare(x, pivot) == Ordering::Less);
            Plan::Split(lm, rm)
        } else {
            // Pivot: the middle of `right`. Elements of `left` less than or equal to it
            // go first.
            let rm = r.len() / 2;
            let pivot = &r[rm];
            let lm = l.partition_point(|x| compare(pivot, x) != Ordering::Less);
            Plan::Split(lm, rm)
        }
    }));
    let (lm, rm) = match plan {
        Ok(Plan::Split(lm, rm)) => (lm, rm),
        Ok(Plan::Sequential) => {
            // SAFETY: the contract is the same.
            unsafe { merge_sequential(left, right, dest, compare) };
            return;
        }
        Ok(Plan::RightThenLeft) => {
            let (dest_right, dest_left) = dest.split_at_mut(right.len());
            // SAFETY: the runs are initialized and owned by this call; `dest_right` and
            // `dest_left` have their lengths and are disjoint from them.
            unsafe {
                move_slots(right, dest_right);
                move_slots(left, dest_left);
            }
            return;
        }
        Ok(Plan::LeftThenRight) => {
            let (dest_left, dest_right) = dest.split_at_mut(left.len());
            // SAFETY: as above.
            unsafe {
                move_slots(left, dest_left);
                move_slots(right, dest_right);
            }
            return;
        }
        Err(payload) => {
            // Nothing was moved yet: move both runs into `dest` as they are.
            let (dest_left, dest_right) = dest.split_at_mut(left.len());
            // SAFETY: as above.
            unsafe {
                move_slots(left, dest_left);
                move_slots(right, dest_right);
            }
            panic::resume_unwind(payload);
        }
    };
    // Both parts are non-empty and smaller than the whole: the first holds the pivot's
    // predecessors in the longer run (at least one, as the longer run has at least two
    // elements when more than `sequential_merge >= 2` elements are merged), the second
    // holds the pivot.
    let (left_first, left_second) = left.split_at_mut(lm);
    let (right_first, right_second) = right.split_at_mut(rm);
    let (dest_first, dest_second) = dest.split_at_mut(lm + rm);
    join(
        // SAFETY: the parts split the runs and `dest` into disjoint pieces with
        // matching lengths; each merge passes the contract on for its own pieces.
        || unsafe { par_merge(left_first, right_first, dest_first, compare, params) },
        // SAFETY: as above.
        || unsafe { par_merge(left_second, right_second, dest_second, compare, params) },
    );
}

/// The sequential merge behind [`par_merge`], with the same contract.
///
/// # Safety
///
/// As for [`par_merge`].
unsafe fn merge_sequential<T, F>(
    left: &mut [MaybeUninit<T>],
    right: &mut [MaybeUninit<T>],
    dest: &mut [MaybeUninit<T>],
    compare: &F,
) where
    F: Fn(&T, &T) -> Ordering,
{
    /// The merge's state. On drop (at the end, or while unwinding from a panicking
    /// comparison) it moves what is left of both runs behind the merged prefix.
    ///
    /// Invariant: `left[..left_len]` and `right[..right_len]` are the elements not yet
    /// moved (initialized, owned by the merge), and `out` points at the first of
    /// exactly `left_len + right_len` slots of `dest` still to be written.
    struct MergeState<T> {
        left: *const T,
        left_len: usize,
        right: *const T,
        right_len: usize,
        out: *mut T,
    }

    impl<T> Drop for MergeState<T> {
        fn drop(&mut self) {
            // SAFETY: by the invariant, the remaining elements are initialized and
            // owned, and `out` has room for all of them; `dest` does not overlap the
            // runs. After the copies the only live copies are in `dest`.
            unsafe {
                ptr::copy_nonoverlapping(self.left, self.out, self.left_len);
                ptr::copy_nonoverlapping(self.right, self.out.add(self.left_len), self.right_len);
            }
        }
    }

    impl<T> MergeState<T> {
        /// Moves the smaller head (the left one on equal elements, as stability
        /// requires) into the first free slot. Branch-free: the comparison of random
        /// data is unpredictable.
        ///
        /// # Safety
        ///
        /// Both runs are non-empty.
        #[inline(always)]
        unsafe fn step_front<F: Fn(&T, &T) -> Ordering>(&mut self, compare: &F) {
            // SAFETY: both runs are non-empty (contract), so `left` and `right` point
            // at initialized, not yet moved elements (invariant).
            let take_right = unsafe { compare(&*self.right, &*self.left) == Ordering::Less };
            let src = if take_right { self.right } else { self.left };
            let (r, l) = (usize::from(take_right), usize::from(!take_right));
            // Exactly one of the runs starts one later (within, or one past the end
            // of, its slice), and `out` with it, which keeps the invariant (a back
            // cursor of the two-ended merge still addresses the last unmoved element
            // and the last free slot).
            // SAFETY: `src` is an unmoved, initialized element, `out` the first free slot.
            unsafe {
                ptr::copy_nonoverlapping(src, self.out, 1);
                self.out = self.out.add(1);
                self.right = self.right.add(r);
                self.left = self.left.add(l);
            }
            self.right_len -= r;
            self.left_len -= l;
        }
    }

    debug_assert_eq!(dest.len(), left.len() + right.len());
    let mut state = MergeState {
        left: left.as_ptr().cast::<T>(),
        left_len: left.len(),
        right: right.as_ptr().cast::<T>(),
        right_len: right.len(),
        out: dest.as_mut_ptr().cast::<T>(),
    };
    // Two merges at once: the front one takes the smaller head into the first free slot,
    // the back one the larger tail into the last. A one-ended merge is a chain of
    // dependent steps (the next load waits on the comparison that picks its address);
    // two independent chains overlap in the core, nearly halving a merge's time (the
    // stable sort of 10M `u64` spent a fifth of its cycles here).
    //
    // Each run keeps at least two unmoved elements at the top of every round, so that
    // after the front step takes one, the back step still compares only unmoved
    // elements: the chains never meet, no element is compared after it was copied (a
    // comparison that changes elements through interior mutability is not lost), and
    // whatever the comparison answers, every step moves one unmoved element into one
    // free slot. The one-ended loop below finishes.
    //
    // The price: on lopsided runs (a few elements that land near the middle of a long
    // run) the back chain compares its way through the long run's tail, which a
    // one-ended merge would just copy: up to twice the comparisons, never more than
    // `n - 1`. The parallel merge's splits keep the runs it hands here balanced on
    // random data.
    if state.left_len >= 2 && state.right_len >= 2 {
        // The back chain's cursors: the last unmoved element of each run and the last
        // free slot. They are kept apart from `state` so that the back chain's loads do
        // not wait on the front chain; `state`'s lengths count both chains' moves.
        // SAFETY: both runs are non-empty and `dest` has room for both.
        let (mut left_back, mut right_back, mut out_back) = unsafe {
            (
                state.left.add(state.left_len - 1),
                state.right.add(state.right_len - 1),
                state.out.add(state.left_len + state.right_len - 1),
            )
        };
        while state.left_len >= 2 && state.right_len >= 2 {
            // SAFETY: both runs are non-empty (lengths >= 2).
            unsafe { state.step_front(compare) };

            // Each run still has an unmoved element (it had two, the front step took
            // at most one): `left_back` and `right_back` address them. On equal
            // elements the one of `right` goes last, as stability requires.
            // SAFETY: as just argued, both back cursors address unmoved elements.
            let take_left = unsafe { compare(&*right_back, &*left_back) == Ordering::Less };
            let src = if take_left { left_back } else { right_back };
            let (l, r) = (usize::from(take_left), usize::from(!take_left));
            // The moved element leaves the end of its run, so the run's length drops by
            // one, and `out_back` moves down to the new last free slot. `wrapping_sub`,
            // so that no bound needs arguing for a cursor whose run is left with fewer
            // than two elements: the loop then ends and the cursor is not used again.
            // SAFETY: `src` is unmoved and `out_back` the last free slot, which is not
            // `out`'s (at least two elements were unmoved).
            unsafe { ptr::copy_nonoverlapping(src, out_back, 1) };
            out_back = out_back.wrapping_sub(1);
            left_back = left_back.wrapping_sub(l);
            right_back = right_back.wrapping_sub(r);
            state.left_len -= l;
            state.right_len -= r;
        }
    }
    while state.left_len > 0 && state.right_len > 0 {
        // SAFETY: both runs are non-empty.
        unsafe { state.step_front(compare) };
    }
    // Dropping `state` moves the rest of the run that is not yet exhausted.
}

/// Moves every element of `src` into `dest`.
///
/// # Safety
///
/// `src` and `dest` have the same length and do not overlap, every slot of `src` holds
/// an initialized `T` owned by the caller, and the prior contents of `dest` are not
/// live values. Afterwards the elements live in `dest`; `src`'s slots are stale.
unsafe fn move_slots<T>(src: &[MaybeUninit<T>], dest: &mut [MaybeUninit<T>]) {
    debug_assert_eq!(src.len(), dest.len());
    // SAFETY: as stated in the contract; `MaybeUninit<T>` may be copied bitwise.
    unsafe { ptr::copy_nonoverlapping(src.as_ptr(), dest.as_mut_ptr(), src.len()) };
}

/// Views initialized slots as values.
///
/// # Safety
///
/// Every slot of `s` holds an initialized `T`.
unsafe fn assume_init_slice<T>(s: &[MaybeUninit<T>]) -> &[T] {
    // SAFETY: same layout, and initialized by the contract.
    unsafe { &*(s as *const [MaybeUninit<T>] as *const [T]) }
}

/// Views initialized slots as mutable values.
///
/// # Safety
///
/// Every slot of `s` holds an initialized `T`. (Writing a `T` through the result keeps
/// the slots initialized.)
unsafe fn assume_init_slice_mut<T>(s: &mut [MaybeUninit<T>]) -> &mut [T] {
    // SAFETY: same layout, and initialized by the contract.
    unsafe { &mut *(s as *mut [MaybeUninit<T>] as *mut [T]) }
}

// ---- quicksort ----

fn quicksort_with<T, F>(v: &mut [T], compare: &F, leaf: usize)
where
    T: Send,
    F: Fn(&T, &T) -> Ordering + Sync,
{
    if mem::size_of::<T>() == 0 {
        // Zero-sized elements are all alike; std's sort returns at once (found in
        // review: the presorted scan alone compared `usize::MAX` pairs).
        v.sort_unstable_by(compare);
        return;
    }
    // Twice the depth of a perfectly balanced recursion: beyond that the pivots have
    // been bad too often, and the piece goes to the sequential sort (which is
    // O(n log n) in the worst case).
    let depth_limit = 2 * (usize::BITS - v.len().leading_zeros());
    // Pieces below 8 elements have no room for a median-of-three pivot.
    let leaf = leaf.max(8);
    if v.len() > leaf && presorted(v, compare) {
        return;
    }
    quicksort(v, None, compare, depth_limit, leaf);
}

/// Sorts `v` in linear time if it is already sorted or strictly descending, and says
/// whether it did. On other inputs it usually gives up after a few comparisons.
fn presorted<T, F>(v: &mut [T], compare: &F) -> bool
where
    F: Fn(&T, &T) -> Ordering,
{
    if v.len() < 2 {
        return true;
    }
    if compare(&v[1], &v[0]) == Ordering::Less {
        // Reversing keeps the sort stable only if no two elements are equal.
        if v.windows(2)
            .all(|w| compare(&w[1], &w[0]) == Ordering::Less)
        {
            v.reverse();
            return true;
        }
        false
    } else {
        v.windows(2)
            .all(|w| compare(&w[1], &w[0]) != Ordering::Less)
    }
}

/// Sorts `v`. `pred`, when given, is an element not greater than any element of `v`
/// (the pivot just left of `v` in an enclosing partition); it is a `&mut` only so that
/// it can be sent to another worker when `T` is `Send` but not `Sync`, and is only read.
fn quicksort<T, F>(
    mut v: &mut [T],
    pred: Option<&mut T>,
    compare: &F,
    mut depth_left: u32,
    leaf: usize,
) where
    T: Send,
    F: Fn(&T, &T) -> Ordering + Sync,
{
    let is_less = |a: &T, b: &T| compare(a, b) == Ordering::Less;
    loop {
        if v.len() <= leaf || depth_left == 0 {
            v.sort_unstable_by(compare);
            return;
        }
        depth_left -= 1;
        let pivot = choose_pivot(v, compare);
        v.swap(0, pivot);

        if pred.as_deref().is_some_and(|pred| !is_less(pred, &v[0])) {
            // The pivot equals `pred`, which no element is less than: the elements not
            // greater than the pivot are all equal to it. Put them first; they are in
            // their final place, only the rest needs sorting (with the same `pred`).
            // This keeps inputs with many duplicates O(n log n).
            let (head, rest) = mem::take(&mut v).split_at_mut(1);
            let pivot = &head[0];
            let equal = partition_by(rest, |x| !is_less(pivot, x));
            v = &mut rest[equal..];
            continue;
        }

        let (head, rest) = v.split_at_mut(1);
        let pivot = &head[0];
        let mid = partition_by(rest, |x| is_less(x, pivot));
        // rest[..mid] (that is, v[1..=mid]) are less than the pivot; swapping the pivot
        // to index `mid` puts one of them (or the pivot itself, when mid == 0) first.
        v.swap(0, mid);
        let (left, rest) = v.split_at_mut(mid);
        let (pivot, right) = rest.split_first_mut().expect("the pivot is at index mid");
        join(
            || quicksort(left, pred, compare, depth_left, leaf),
            || quicksort(right, Some(pivot), compare, depth_left, leaf),
        );
        return;
    }
}

/// The index of a pivot: the median of three samples, or for larger slices the median
/// of three medians of three (Tukey's ninther). `v.len() >= 8`.
fn choose_pivot<T, F>(v: &[T], compare: &F) -> usize
where
    F: Fn(&T, &T) -> Ordering,
{
    let len = v.len();
    let (a, b, c) = (len / 4, len / 2, len / 4 * 3);
    if len >= 64 {
        let a = median3(v, a - 1, a, a + 1, compare);
        let b = median3(v, b - 1, b, b + 1, compare);
        let c = median3(v, c - 1, c, c + 1, compare);
        median3(v, a, b, c, compare)
    } else {
        median3(v, a, b, c, compare)
    }
}

/// Of the indices `a`, `b`, `c`, the one whose element is the median.
fn median3<T, F>(v: &[T], a: usize, b: usize, c: usize, compare: &F) -> usize
where
    F: Fn(&T, &T) -> Ordering,
{
    let less = |i: usize, j: usize| compare(&v[i], &v[j]) == Ordering::Less;
    // Order a and b, then place c.
    let (lo, hi) = if less(b, a) { (b, a) } else { (a, b) };
    if less(c, lo) {
        lo
    } else if less(hi, c) {
        hi
    } else {
        c
    }
}

/// Moves the elements for which `goes_left` holds to the front of `v`, keeping none of
/// the orders, and returns how many there are.
///
/// Branch-free Lomuto partition: every element is swapped to the boundary, and the
/// boundary advances past it only if it goes left. Invariant at step `j`:
/// `v[..l]` go left and `v[l..j]` do not. Only safe swaps, so a panicking `goes_left`
/// leaves a permutation.
fn partition_by<T>(v: &mut [T], mut goes_left: impl FnMut(&T) -> bool) -> usize {
    let mut l = 0;
    for j in 0..v.len() {
        let left = goes_left(&v[j]);
        v.swap(l, j);
        l += usize::from(left);
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The depth at which the merge sort's recursion stops for `len` elements and `leaf`.
    fn leaf_depth(len: usize, leaf: usize) -> u32 {
        if len <= leaf {
            0
        } else {
            1 + leaf_depth(len / 2, leaf).max(leaf_depth(len - len / 2, leaf))
        }
    }

    #[test]
    fn leaves_are_small_enough_many_enough_and_at_an_even_depth() {
        for workers in [0usize, 1, 2, 3, 4, 7, 8, 16, 100] {
            for size in [1usize, 8, 24, 512] {
                for len in [
                    1,
                    4096,
                    8191,
                    8192,
                    20_480,
                    100_000,
                    999_999,
                    1 << 20,
                    (1 << 20) + 1,
                    10_000_000,
                ] {
                    let leaf = leaf_for(len, size, workers);
                    let depth = leaf_depth(len, leaf);
                    let what = format!("len {len}, size {size}, {workers} workers: leaf {leaf}");
                    assert_eq!(depth % 2, 0, "{what}: odd depth {depth}");
                    if len < 2 * MERGESORT_LEAF {
                        assert_eq!(depth, 0, "{what}");
                        continue;
                    }
                    // Exactly `depth` levels, so no leaf is much shorter than `leaf`.
                    assert!(len >> depth >= MERGESORT_LEAF, "{what}: leaves too small");
                    assert_eq!(leaf, len.div_ceil(1 << depth), "{what}");
                    // Enough leaves for the workers and small enough ones, unless that
                    // would take leaves below `MERGESORT_LEAF` elements.
                    let room = len / MERGESORT_LEAF >= 4 << depth;
                    if room {
                        assert!(
                            1 << depth >= workers.max(1) * LEAVES_PER_WORKER,
                            "{what}: too few leaves"
                        );
                        assert!(leaf * size <= LEAF_BYTES, "{what}: leaves too large");
                    }
                }
            }
        }
        // The measured cases: 64 leaves on 2 workers, 256 on 16, for 10M `u64`.
        assert_eq!(leaf_for(10_000_000, 8, 2), 10_000_000usize.div_ceil(64));
        assert_eq!(leaf_for(10_000_000, 8, 16), 10_000_000usize.div_ceil(256));
    }
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            // xorshift64*
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
    }

    fn inputs() -> Vec<Vec<(u32, usize)>> {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut out = Vec::new();
        let lens: &[usize] = if cfg!(miri) {
            &[0, 1, 2, 9, 17, 65, 130]
        } else {
            &[0, 1, 2, 3, 7, 8, 9, 16, 31, 64, 65, 100, 257, 1000, 3001]
        };
        for &len in lens {
            for modulus in [1u64, 2, 10, 1 << 32] {
                let v = (0..len)
                    .map(|i| ((rng.next() % modulus) as u32, i))
                    .collect::<Vec<_>>();
                out.push(v);
            }
            out.push((0..len).map(|i| (i as u32, i)).collect());
            out.push((0..len).map(|i| ((len - i) as u32, i)).collect());
            // Sorted, then descending, except for the ends: not presorted, but made of
            // runs that are already in order.
            let mut nearly: Vec<(u32, usize)> = (0..len).map(|i| (i as u32, i)).collect();
            if len > 1 {
                nearly.swap(0, len - 1);
            }
            out.push(nearly.clone());
            nearly.reverse();
            out.push(nearly);
            // Organ pipe.
            out.push((0..len).map(|i| (i.min(len - i) as u32, i)).collect());
        }
        out
    }

    #[test]
    fn mergesort_small_cutoffs_is_stable_and_sorted() {
        for input in inputs() {
            for (leaf, merge) in [(1, 2), (2, 2), (4, 8), (16, 3), (64, 64)] {
                let mut expected = input.clone();
                expected.sort_by_key(|p| p.0);
                let mut v = input.clone();
                mergesort_with(
                    &mut v,
                    &|a: &(u32, usize), b: &(u32, usize)| a.0.cmp(&b.0),
                    leaf,
                    merge,
                );
                assert_eq!(v, expected, "leaf {leaf} merge {merge} len {}", input.len());
            }
        }
    }

    #[test]
    fn quicksort_small_cutoffs_sorts() {
        for input in inputs() {
            for leaf in [1, 8, 20, 100] {
                let mut expected = input.clone();
                expected.sort();
                let mut v = input.clone();
                quicksort_with(&mut v, &|a: &(u32, usize), b: &(u32, usize)| a.cmp(b), leaf);
                assert_eq!(v, expected, "leaf {leaf} len {}", input.len());
                let mut keys: Vec<u32> = input.iter().map(|p| p.0).collect();
                let mut expected: Vec<u32> = keys.clone();
                expected.sort_unstable();
                quicksort_with(&mut keys, &u32::cmp, leaf);
                assert_eq!(keys, expected);
            }
        }
    }

    #[test]
    fn quicksort_many_duplicates_is_linear() {
        let n = if cfg!(miri) { 500 } else { 100_000 };
        for distinct in [1u32, 2, 3] {
            let mut v: Vec<u32> = (0..n).map(|i| i as u32 % distinct).collect();
            let calls = AtomicUsize::new(0);
            let compare = |a: &u32, b: &u32| {
                calls.fetch_add(1, AtomicOrdering::Relaxed);
                a.cmp(b)
            };
            quicksort_with(&mut v, &compare, 8);
            assert!(v.windows(2).all(|w| w[0] <= w[1]));
            let calls = calls.into_inner();
            assert!(
                calls < 4 * n * distinct as usize,
                "{calls} comparisons for {n} elements"
            );
        }
    }

    #[test]
    fn zero_sized_elements() {
        let n = if cfg!(miri) { 100 } else { 10_000 };
        let mut v = vec![(); n];
        mergesort_with(&mut v, &<()>::cmp, 4, 4);
        quicksort_with(&mut v, &<()>::cmp, 8);
        assert_eq!(v.len(), n);
    }

    /// Live `Tracked` elements of `panicking_comparison_leaves_a_permutation`; each test
    /// that counts has its own counter, since tests run at once.
    static LIVE: AtomicUsize = AtomicUsize::new(0);
    /// The same for `merge_with_an_inconsistent_comparison_keeps_a_permutation`.
    static LIVE_INCONSISTENT: AtomicUsize = AtomicUsize::new(0);

    /// An element that counts live instances (in `live`) and detects double drops.
    #[derive(Debug)]
    struct Tracked {
        key: u32,
        id: usize,
        alive: bool,
        live: &'static AtomicUsize,
    }

    impl Tracked {
        fn new(key: u32, id: usize) -> Self {
            Self::counted_in(key, id, &LIVE)
        }

        fn counted_in(key: u32, id: usize, live: &'static AtomicUsize) -> Self {
            live.fetch_add(1, AtomicOrdering::SeqCst);
            Tracked {
                key,
                id,
                alive: true,
                live,
            }
        }
    }

    impl Drop for Tracked {
        fn drop(&mut self) {
            assert!(self.alive, "double drop of element {}", self.id);
            self.alive = false;
            self.live.fetch_sub(1, AtomicOrdering::SeqCst);
        }
    }

    fn panicking_sort(stable: bool, len: usize, panic_after: usize) {
        let mut rng = Rng(len as u64 * 31 + panic_after as u64 + 1);
        let mut v: Vec<Tracked> = (0..len)
            .map(|i| Tracked::new((rng.next() % 50) as u32, i))
            .collect();
        let calls = AtomicUsize::new(0);
        let compare = |a: &Tracked, b: &Tracked| {
            assert!(a.alive && b.alive, "compared a dead element");
            if calls.fetch_add(1, AtomicOrdering::Relaxed) == panic_after {
                panic!("comparison panicked on purpose");
            }
            a.key.cmp(&b.key)
        };
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            if stable {
                mergesort_with(&mut v, &compare, 8, 8);
            } else {
                quicksort_with(&mut v, &compare, 8);
            }
        }));
        assert!(result.is_err() || calls.load(AtomicOrdering::Relaxed) <= panic_after);
        let mut ids: Vec<usize> = v.iter().map(|t| t.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..len).collect::<Vec<_>>(), "not a permutation");
        assert!(v.iter().all(|t| t.alive));
        drop(v);
    }

    #[test]
    fn panicking_comparison_leaves_a_permutation() {
        let before = LIVE.load(AtomicOrdering::SeqCst);
        let lens: &[usize] = if cfg!(miri) {
            &[10, 100]
        } else {
            &[10, 100, 500]
        };
        for &len in lens {
            for panic_after in [0, 1, 5, 50, 400, 2000] {
                panicking_sort(true, len, panic_after);
                panicking_sort(false, len, panic_after);
            }
        }
        assert_eq!(LIVE.load(AtomicOrdering::SeqCst), before);
    }

    /// Runs `merge_sequential` on `left ++ right` (each already sorted by `compare`) and
    /// returns the merged elements.
    fn merge_pair<T, F: Fn(&T, &T) -> Ordering>(mut v: Vec<T>, mid: usize, compare: F) -> Vec<T> {
        let len = v.len();
        let mut buf: Vec<T> = Vec::with_capacity(len);
        let scratch = &mut buf.spare_capacity_mut()[..len];
        // SAFETY: `v` is initialized; the merge moves all elements into `scratch`, and
        // they are moved back right after (also when the merge unwinds).
        unsafe {
            let slots = &mut *(v.as_mut_slice() as *mut [T] as *mut [MaybeUninit<T>]);
            let (l, r) = slots.split_at_mut(mid);
            let merged = panic::catch_unwind(AssertUnwindSafe(|| {
                merge_sequential(l, r, scratch, &compare)
            }));
            move_slots(scratch, slots);
            if let Err(payload) = merged {
                panic::resume_unwind(payload);
            }
        }
        v
    }

    #[test]
    fn comparison_mutating_through_cell_is_kept() {
        // A comparison that mutates elements through interior mutability: every
        // mutation must survive the moves, so no element may be compared after the
        // copy that the merge keeps was taken (the two-ended merge must not let its
        // chains meet).
        for (len, mid) in [
            (300, 150),
            (300, 1),
            (300, 299),
            (7, 3),
            (2, 1),
            (5, 2),
            (64, 40),
        ] {
            let mut v: Vec<(u32, Cell<u32>)> = (0..len as u32)
                .map(|k| ((k * 7919) % 101, Cell::new(0)))
                .collect();
            v[..mid].sort_by_key(|p| p.0);
            v[mid..].sort_by_key(|p| p.0);
            let calls = Cell::new(0u32);
            // `Cell` is not `Sync`, so this runs the sequential merge directly.
            let compare = |a: &(u32, Cell<u32>), b: &(u32, Cell<u32>)| {
                calls.set(calls.get() + 1);
                a.1.set(a.1.get() + 1);
                b.1.set(b.1.get() + 1);
                a.0.cmp(&b.0)
            };
            let v = merge_pair(v, mid, compare);
            let marks: u32 = v.iter().map(|p| p.1.get()).sum();
            assert_eq!(
                marks,
                2 * calls.get(),
                "len {len} mid {mid}: a mark was lost"
            );
            assert!(v.windows(2).all(|w| w[0].0 <= w[1].0));
        }
    }

    #[test]
    fn merge_is_stable_for_every_split() {
        let mut rng = Rng(7);
        for len in 0..40usize {
            for mid in 0..=len {
                let mut v: Vec<(u32, usize)> =
                    (0..len).map(|i| ((rng.next() % 4) as u32, i)).collect();
                v[..mid].sort_by_key(|p| p.0);
                v[mid..].sort_by_key(|p| p.0);
                let mut expected = v.clone();
                expected.sort_by_key(|p| p.0);
                let merged = merge_pair(v, mid, |a: &(u32, usize), b: &(u32, usize)| a.0.cmp(&b.0));
                assert_eq!(merged, expected, "len {len} mid {mid}");
            }
        }
    }

    #[test]
    fn merge_with_an_inconsistent_comparison_keeps_a_permutation() {
        // A comparison that answers at random: the order is unspecified, but every
        // element must come out exactly once (`Tracked` detects double drops).
        let before = LIVE_INCONSISTENT.load(AtomicOrdering::SeqCst);
        let mut rng = Rng(11);
        for len in [2usize, 3, 4, 9, 64, 1000] {
            for mid in [1, len / 2, len - 1] {
                let v: Vec<Tracked> = (0..len)
                    .map(|i| Tracked::counted_in(i as u32, i, &LIVE_INCONSISTENT))
                    .collect();
                let answers = Cell::new(rng.next());
                let compare = |a: &Tracked, b: &Tracked| {
                    assert!(a.alive && b.alive, "compared a dead element");
                    let x = answers.get();
                    answers.set(x.rotate_left(7) ^ 0x9E37_79B9_7F4A_7C15);
                    [Ordering::Less, Ordering::Equal, Ordering::Greater][(x % 3) as usize]
                };
                let v = merge_pair(v, mid, compare);
                let mut ids: Vec<usize> = v.iter().map(|t| t.id).collect();
                ids.sort_unstable();
                assert_eq!(ids, (0..len).collect::<Vec<_>>(), "not a permutation");
            }
        }
        assert_eq!(LIVE_INCONSISTENT.load(AtomicOrdering::SeqCst), before);
    }

    // ---- Adversarial review of the two-ended `merge_sequential` (79dc69d) ----
    //
    // These use their own live counters (not the shared `LIVE`), so that they stay exact
    // while other tests run on other threads.

    /// An element that records the comparisons made on it (through interior
    /// mutability), counts live instances in its own counter and detects double drops.
    struct Probe<'a> {
        id: usize,
        marks: Cell<u32>,
        live: &'a Cell<usize>,
        alive: bool,
    }

    impl<'a> Probe<'a> {
        fn new(id: usize, live: &'a Cell<usize>) -> Self {
            live.set(live.get() + 1);
            Probe {
                id,
                marks: Cell::new(0),
                live,
                alive: true,
            }
        }
    }

    impl Drop for Probe<'_> {
        fn drop(&mut self) {
            assert!(self.alive, "double drop of element {}", self.id);
            self.alive = false;
            self.live.set(self.live.get() - 1);
        }
    }

    /// Merges `ll` elements with `rl` elements by a comparison whose `i`-th answer is
    /// `Less` if bit `i` of `bits` is set (else `Greater`), panicking at call `panic_at`.
    /// Checks: every comparison gets a right-run element first and a left-run element
    /// second, both in the source (never in `dest`), never more than `ll + rl - 1`
    /// calls, every element out exactly once, every comparison's marks kept, no drop.
    fn review_merge_scripted(ll: usize, rl: usize, bits: u64, panic_at: Option<usize>) {
        let live = Cell::new(0usize);
        let n = ll + rl;
        {
            let v: Vec<Probe<'_>> = (0..n).map(|i| Probe::new(i, &live)).collect();
            let base = v.as_ptr() as usize;
            let size = mem::size_of::<Probe<'_>>();
            let (lo, mid, hi) = (base, base + ll * size, base + n * size);
            let calls = Cell::new(0usize);
            let compare = |a: &Probe<'_>, b: &Probe<'_>| {
                let (pa, pb) = (
                    a as *const Probe<'_> as usize,
                    b as *const Probe<'_> as usize,
                );
                assert!(mid <= pa && pa < hi, "first argument not in the right run");
                assert!(lo <= pb && pb < mid, "second argument not in the left run");
                assert!(a.alive && b.alive);
                let i = calls.get();
                calls.set(i + 1);
                assert!(i + 1 < n.max(1), "more than n - 1 comparisons");
                a.marks.set(a.marks.get() + 1);
                b.marks.set(b.marks.get() + 1);
                if Some(i) == panic_at {
                    panic!("scripted panic");
                }
                if bits >> i & 1 == 1 {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            };
            let r = panic::catch_unwind(AssertUnwindSafe(|| merge_pair(v, ll, compare)));
            let what = format!("ll {ll} rl {rl} bits {bits:b} panic_at {panic_at:?}");
            let out = match r {
                Ok(out) => {
                    assert!(
                        panic_at.is_none_or(|p| p >= calls.get()),
                        "{what}: lost panic"
                    );
                    out
                }
                Err(_) => {
                    assert_eq!(Some(calls.get() - 1), panic_at, "{what}");
                    // `merge_pair` moved everything back before re-raising, but the
                    // vector went with the unwinding: rebuild the check from `live`.
                    assert_eq!(live.get(), 0, "{what}: elements leaked or double-dropped");
                    return;
                }
            };
            assert_eq!(live.get(), n, "{what}");
            let mut ids: Vec<usize> = out.iter().map(|p| p.id).collect();
            ids.sort_unstable();
            assert_eq!(ids, (0..n).collect::<Vec<_>>(), "{what}: not a permutation");
            let marks: usize = out.iter().map(|p| p.marks.get() as usize).sum();
            assert_eq!(
                marks,
                2 * calls.get(),
                "{what}: a comparison's mark was lost"
            );
        }
        assert_eq!(live.get(), 0, "ll {ll} rl {rl}: leak or double drop");
    }

    #[test]
    fn review_merge_every_answer_sequence_small_runs() {
        // The merge only distinguishes `Less` from not-`Less`, and makes at most
        // `n - 1` comparisons: this covers every comparison behaviour, consistent or
        // not, for runs of 0..=6 elements on either side.
        for ll in 0..=6usize {
            for rl in 0..=6usize {
                let max_calls = (ll + rl).saturating_sub(1);
                for bits in 0u64..(1 << max_calls) {
                    review_merge_scripted(ll, rl, bits, None);
                }
            }
        }
    }

    #[test]
    fn review_merge_every_answer_sequence_with_a_panic_at_every_call() {
        // A panic at every call index (front step and back step of every round, and in
        // the one-ended tail), under every answer sequence, runs of 0..=4 elements (the
        // next test goes to 5, checking the elements left in place).
        for ll in 0..=4usize {
            for rl in 0..=4usize {
                let max_calls = (ll + rl).saturating_sub(1);
                for bits in 0u64..(1 << max_calls) {
                    for p in 0..max_calls {
                        review_merge_scripted(ll, rl, bits, Some(p));
                    }
                }
            }
        }
    }

    /// The panic case of `review_merge_scripted` keeps the elements: check the
    /// permutation in the vector that the merge moved back into, with an outer guard.
    #[test]
    fn review_merge_panic_leaves_every_element_in_place_once() {
        for ll in 0..=5usize {
            for rl in 0..=5usize {
                let n = ll + rl;
                let max_calls = n.saturating_sub(1);
                for bits in 0u64..(1 << max_calls) {
                    for p in 0..max_calls {
                        let live = Cell::new(0usize);
                        let mut v: Vec<Probe<'_>> = (0..n).map(|i| Probe::new(i, &live)).collect();
                        let calls = Cell::new(0usize);
                        let compare = |a: &Probe<'_>, b: &Probe<'_>| {
                            let i = calls.get();
                            calls.set(i + 1);
                            a.marks.set(a.marks.get() + 1);
                            b.marks.set(b.marks.get() + 1);
                            if i == p {
                                panic!("scripted panic");
                            }
                            if bits >> i & 1 == 1 {
                                Ordering::Less
                            } else {
                                Ordering::Greater
                            }
                        };
                        let mut buf: Vec<Probe<'_>> = Vec::with_capacity(n);
                        let scratch = &mut buf.spare_capacity_mut()[..n];
                        // SAFETY: as in `merge_pair`: the merge takes the elements and
                        // its drop guard puts them all into `scratch`, also on a panic;
                        // they are moved back before `v` is used again.
                        let r = unsafe {
                            let slots = &mut *(v.as_mut_slice() as *mut [Probe<'_>]
                                as *mut [MaybeUninit<Probe<'_>>]);
                            let (l, rr) = slots.split_at_mut(ll);
                            let r = panic::catch_unwind(AssertUnwindSafe(|| {
                                merge_sequential(l, rr, scratch, &compare)
                            }));
                            move_slots(scratch, slots);
                            r
                        };
                        let what = format!("ll {ll} rl {rl} bits {bits:b} panic at {p}");
                        if r.is_ok() {
                            // This answer sequence ends the merge before call `p`.
                            assert!(calls.get() <= p, "{what}: the panic was swallowed");
                        } else {
                            assert_eq!(calls.get(), p + 1, "{what}");
                        }
                        let mut ids: Vec<usize> = v.iter().map(|e| e.id).collect();
                        ids.sort_unstable();
                        assert_eq!(ids, (0..n).collect::<Vec<_>>(), "{what}: not a permutation");
                        let marks: usize = v.iter().map(|e| e.marks.get() as usize).sum();
                        assert_eq!(marks, 2 * calls.get(), "{what}: a mark was lost");
                        assert_eq!(live.get(), n);
                        drop(v);
                        assert_eq!(live.get(), 0, "{what}: double drop or leak");
                    }
                }
            }
        }
    }

    #[test]
    fn review_merge_every_sorted_key_pattern_is_stable() {
        // Every pair of sorted runs over keys {0, 1, 2} with up to 6 elements a side:
        // the merge must equal the standard stable sort (ids in order among equals).
        fn sorted_runs(len: usize) -> Vec<Vec<u32>> {
            if len == 0 {
                return vec![vec![]];
            }
            let mut out = Vec::new();
            for mut run in sorted_runs(len - 1) {
                let last = run.last().copied().unwrap_or(0);
                for k in last..3 {
                    let mut r = run.clone();
                    r.push(k);
                    out.push(r);
                }
                run.clear();
            }
            out
        }
        for ll in 0..=6usize {
            for rl in 0..=6usize {
                for l in sorted_runs(ll) {
                    for r in sorted_runs(rl) {
                        let v: Vec<(u32, usize)> =
                            l.iter().chain(r.iter()).copied().zip(0..).collect();
                        let mut expected = v.clone();
                        expected.sort_by_key(|p| p.0);
                        let merged =
                            merge_pair(v.clone(), ll, |a: &(u32, usize), b: &(u32, usize)| {
                                a.0.cmp(&b.0)
                            });
                        assert_eq!(merged, expected, "{v:?} split at {ll}");
                    }
                }
            }
        }
    }

    #[test]
    fn review_merge_huge_elements_stable_and_intact() {
        // 512-byte elements: key in word 0, id in word 1, the rest a pattern of the id.
        let mut rng = Rng(99);
        for (len, mid) in [
            (2, 1),
            (4, 2),
            (5, 2),
            (5, 3),
            (9, 4),
            (100, 37),
            (257, 128),
        ] {
            let mut v: Vec<[u64; 64]> = (0..len)
                .map(|i| {
                    let mut e = [0u64; 64];
                    e[0] = rng.next() % 3;
                    e[1] = i as u64;
                    for (w, x) in e.iter_mut().enumerate().skip(2) {
                        *x = (i as u64).wrapping_mul(0x9E37_79B9) ^ w as u64;
                    }
                    e
                })
                .collect();
            v[..mid].sort_by_key(|e| e[0]);
            v[mid..].sort_by_key(|e| e[0]);
            let mut expected = v.clone();
            expected.sort_by_key(|e| e[0]);
            let merged = merge_pair(v, mid, |a: &[u64; 64], b: &[u64; 64]| a[0].cmp(&b[0]));
            assert!(merged == expected, "len {len} mid {mid}");
        }
    }

    #[test]
    fn review_merge_zero_sized_elements_with_drop() {
        // `mergesort_with` sends zero-sized types to the standard sort, but the merge's
        // contract covers them too: pointer steps are no-ops, no element may be lost.
        thread_local!(static ZLIVE: Cell<isize> = const { Cell::new(0) });
        struct Z;
        impl Drop for Z {
            fn drop(&mut self) {
                ZLIVE.with(|c| c.set(c.get() - 1));
            }
        }
        for ll in 0..=5usize {
            for rl in 0..=5usize {
                let n = ll + rl;
                for bits in 0u64..(1 << n.saturating_sub(1)) {
                    for panic_at in [None, Some(0usize), Some(1), Some(3)] {
                        ZLIVE.with(|c| c.set(n as isize));
                        let v: Vec<Z> = (0..n).map(|_| Z).collect();
                        let calls = Cell::new(0usize);
                        let compare = |_: &Z, _: &Z| {
                            let i = calls.get();
                            calls.set(i + 1);
                            if Some(i) == panic_at {
                                panic!("zst panic");
                            }
                            if bits >> i & 1 == 1 {
                                Ordering::Less
                            } else {
                                Ordering::Greater
                            }
                        };
                        let r =
                            panic::catch_unwind(AssertUnwindSafe(|| merge_pair(v, ll, compare)));
                        if let Ok(out) = r {
                            assert_eq!(out.len(), n);
                            assert_eq!(ZLIVE.with(Cell::get), n as isize);
                        }
                        // Whatever happened, after everything is dropped none is left
                        // and none was dropped twice.
                        assert_eq!(ZLIVE.with(Cell::get), 0, "ll {ll} rl {rl} {panic_at:?}");
                    }
                }
            }
        }
    }

    /// A `Sync` element for `mergesort_with`: marks through an atomic, its own live count.
    struct SyncProbe<'a> {
        key: u32,
        id: usize,
        marks: AtomicUsize,
        live: &'a AtomicUsize,
        alive: bool,
    }

    impl Drop for SyncProbe<'_> {
        fn drop(&mut self) {
            assert!(self.alive, "double drop of element {}", self.id);
            self.alive = false;
            self.live.fetch_sub(1, AtomicOrdering::SeqCst);
        }
    }

    fn sync_probes(len: usize, distinct: u64, seed: u64, live: &AtomicUsize) -> Vec<SyncProbe<'_>> {
        let mut rng = Rng(seed | 1);
        (0..len)
            .map(|i| {
                live.fetch_add(1, AtomicOrdering::SeqCst);
                SyncProbe {
                    key: (rng.next() % distinct) as u32,
                    id: i,
                    marks: AtomicUsize::new(0),
                    live,
                    alive: true,
                }
            })
            .collect()
    }

    /// `v` holds the probes `0..v.len()` once each (in some order), and every mark of
    /// `calls` comparisons (two a call) is there.
    fn assert_intact(v: &[SyncProbe<'_>], calls: usize, what: &str) {
        let mut ids: Vec<usize> = v.iter().map(|e| e.id).collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            (0..v.len()).collect::<Vec<_>>(),
            "{what}: not a permutation"
        );
        let marks: usize = v
            .iter()
            .map(|e| e.marks.load(AtomicOrdering::Relaxed))
            .sum();
        assert_eq!(marks, 2 * calls, "{what}: lost mark");
    }

    #[test]
    fn review_mergesort_small_cutoffs_panic_at_every_call() {
        // The whole merge sort with tiny leaves and sequential-merge cut-offs, so that
        // the two-ended merge runs on runs of every small length, with a panic at every
        // comparison index in turn: a permutation, every mark kept, nothing dropped.
        for len in [2usize, 3, 4, 5, 6, 7, 9, 13, 17, 24] {
            for (leaf, merge) in [(1, 2), (2, 3), (3, 8), (1, 64)] {
                for distinct in [2u64, 1000] {
                    let seed = (len * 131 + leaf * 7 + merge) as u64 + distinct;
                    // First a clean run to learn how many comparisons there are.
                    let live = AtomicUsize::new(0);
                    let total = {
                        let mut v = sync_probes(len, distinct, seed, &live);
                        let calls = AtomicUsize::new(0);
                        mergesort_with(
                            &mut v,
                            &|a: &SyncProbe<'_>, b: &SyncProbe<'_>| {
                                calls.fetch_add(1, AtomicOrdering::Relaxed);
                                a.key.cmp(&b.key)
                            },
                            leaf,
                            merge,
                        );
                        assert!(v
                            .windows(2)
                            .all(|w| (w[0].key, w[0].id) <= (w[1].key, w[1].id)));
                        calls.into_inner()
                    };
                    assert_eq!(live.load(AtomicOrdering::SeqCst), 0);
                    for p in 0..=total {
                        let mut v = sync_probes(len, distinct, seed, &live);
                        let calls = AtomicUsize::new(0);
                        let compare = |a: &SyncProbe<'_>, b: &SyncProbe<'_>| {
                            assert!(a.alive && b.alive);
                            a.marks.fetch_add(1, AtomicOrdering::Relaxed);
                            b.marks.fetch_add(1, AtomicOrdering::Relaxed);
                            if calls.fetch_add(1, AtomicOrdering::Relaxed) == p {
                                panic!("panic at {p}");
                            }
                            a.key.cmp(&b.key)
                        };
                        let r = panic::catch_unwind(AssertUnwindSafe(|| {
                            mergesort_with(&mut v, &compare, leaf, merge)
                        }));
                        let what =
                            format!("len {len} leaf {leaf} merge {merge} panic at {p}/{total}");
                        assert_eq!(r.is_err(), p < total, "{what}");
                        assert_intact(&v, calls.load(AtomicOrdering::Relaxed), &what);
                        assert_eq!(live.load(AtomicOrdering::SeqCst), len, "{what}");
                        if r.is_ok() {
                            assert!(
                                v.windows(2)
                                    .all(|w| (w[0].key, w[0].id) <= (w[1].key, w[1].id)),
                                "{what}: unstable"
                            );
                        }
                        drop(v);
                        assert_eq!(live.load(AtomicOrdering::SeqCst), 0, "{what}");
                    }
                }
            }
        }
    }

    #[test]
    fn review_mergesort_small_cutoffs_inconsistent_comparisons() {
        // Random answers, always Less, always Greater, always Equal, and a cyclic
        // (non-transitive) order, with tiny cut-offs: permutation, marks, no drop.
        for len in [2usize, 3, 4, 5, 7, 9, 16, 33, 100, 300] {
            for (leaf, merge) in [(1, 2), (2, 3), (4, 8), (1, 1000)] {
                for kind in 0..5u64 {
                    for seed in 0..8u64 {
                        let live = AtomicUsize::new(0);
                        let mut v = sync_probes(len, 10, seed + 1, &live);
                        let state = AtomicUsize::new(seed as usize * 0x9E37_79B9 + 1);
                        let calls = AtomicUsize::new(0);
                        let compare = |a: &SyncProbe<'_>, b: &SyncProbe<'_>| {
                            calls.fetch_add(1, AtomicOrdering::Relaxed);
                            a.marks.fetch_add(1, AtomicOrdering::Relaxed);
                            b.marks.fetch_add(1, AtomicOrdering::Relaxed);
                            match kind {
                                0 => {
                                    let s = state.fetch_add(0x9E37_79B9, AtomicOrdering::Relaxed);
                                    [Ordering::Less, Ordering::Equal, Ordering::Greater]
                                        [(s.wrapping_mul(0x2545_F491) >> 7) % 3]
                                }
                                1 => Ordering::Less,
                                2 => Ordering::Greater,
                                3 => Ordering::Equal,
                                _ => match (a.key + 10 - b.key) % 10 {
                                    0 => Ordering::Equal,
                                    d if d < 5 => Ordering::Greater,
                                    _ => Ordering::Less,
                                },
                            }
                        };
                        // The standard sort (the leaves) may panic on a non-total order.
                        let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                            mergesort_with(&mut v, &compare, leaf, merge)
                        }));
                        let what = format!("len {len} leaf {leaf} merge {merge} kind {kind}");
                        assert_intact(&v, calls.load(AtomicOrdering::Relaxed), &what);
                        if kind == 3 {
                            // Everything equal: stability means the input order.
                            assert!(
                                v.iter().enumerate().all(|(i, e)| e.id == i),
                                "{what}: unstable"
                            );
                        }
                        drop(v);
                        assert_eq!(live.load(AtomicOrdering::SeqCst), 0, "{what}");
                    }
                }
            }
        }
    }
}
