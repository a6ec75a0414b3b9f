//! A select's group, nodes and order in one allocation.
//!
//! A select that finds nothing ready makes a node per operation and a group they all
//! point to. Boxed one by one, with the table of nodes and the order in `Vec`s, that
//! was seven allocations and frees for a select of four receives (the callgrind count
//! of one async select that waited: a quarter of its instructions in `malloc` and
//! `free`). Here they share one block:
//!
//! ```text
//! Head { layout, ops, order_len, group } | table: [Option<NonNull<dyn OpNode>>; ops]
//!                                        | order: [usize; ops] | node | node | ...
//! ```
//!
//! Each operation's handle says how large its node is ([`Handle::node_layout`]) and
//! builds it in place ([`Handle::node_in`]); the table keeps the nodes as trait
//! objects. The block is freed, every node and the group dropped in place, when the
//! owner is: the select's `Machine`, or the `SelectedOperation` it hands the block to.

use std::alloc::Layout;
use std::marker::PhantomData;
use std::ptr::{addr_of, addr_of_mut, NonNull};

use super::{Entry, OpNode};
use crate::waitlist::{Group, Kind};

/// A node, as the table keeps it: a trait object whose storage is in the block.
type Slot<'a> = Option<NonNull<dyn OpNode + 'a>>;

struct Head {
    /// Of the whole block: what it is freed with.
    layout: Layout,
    /// Entries of the table and room in the order.
    ops: usize,
    /// Entries of the order in use.
    order_len: usize,
    table_at: usize,
    order_at: usize,
    group: Group,
}

/// The block: owns the group and every node in it.
pub(super) struct Nodes<'a> {
    head: NonNull<Head>,
    /// Owns nodes that borrow the operations' handles for `'a`.
    _own: PhantomData<Box<dyn OpNode + 'a>>,
}

// SAFETY: the block holds a `Group` (atomics) and nodes that are `Send + Sync`
// (`OpNode`'s bounds); it is reached only through this owner, `&self` for shared
// access and `&mut self` for the order's writes.
unsafe impl Send for Nodes<'_> {}
// SAFETY: as above; nothing is written through `&self` but the nodes' and group's own
// atomics and locks.
unsafe impl Sync for Nodes<'_> {}

/// Where each part of the block goes: the block's layout, then the offsets of the
/// table, the order and (through `each_node`) every node. Computed twice, the same way
/// (once to size the block, once to fill it), so that no list of offsets is allocated.
fn plan<'a>(
    ops: &[Option<Entry<'a>>],
    mut each_node: impl FnMut(usize, Entry<'a>, usize),
) -> (Layout, usize, usize) {
    let too_large = "a select of this many operations does not fit in memory";
    let layout = Layout::new::<Head>();
    let (layout, table_at) = layout
        .extend(Layout::array::<Slot<'a>>(ops.len()).expect(too_large))
        .expect(too_large);
    let (mut layout, order_at) = layout
        .extend(Layout::array::<usize>(ops.len()).expect(too_large))
        .expect(too_large);
    for (i, e) in ops.iter().enumerate() {
        if let Some(e) = e {
            let (l, at) = layout.extend(e.handle.node_layout()).expect(too_large);
            layout = l;
            each_node(i, *e, at);
        }
    }
    (layout.pad_to_align(), table_at, order_at)
}

impl<'a> Nodes<'a> {
    /// A block with a node for every operation in `ops` (`None`: removed, no node),
    /// and the order holding the operations' indices in source order.
    pub(super) fn new(ops: &[Option<Entry<'a>>], kind: Kind) -> Nodes<'a> {
        let (layout, table_at, order_at) = plan(ops, |_, _, _| {});
        // SAFETY: `layout` is not zero-sized (it starts with a `Head`).
        let base = unsafe { std::alloc::alloc(layout) };
        let Some(head) = NonNull::new(base.cast::<Head>()) else {
            std::alloc::handle_alloc_error(layout)
        };
        // Every table entry is `None` before any node is built, so a drop during the
        // build (a handle that panics) finds only nodes that exist; the order is
        // written before anything reads it.
        // SAFETY: `base` is a fresh block of `layout`: the head at offset 0, the table
        // and the order at the offsets `Layout::extend` gave for their arrays of
        // `ops.len()` (aligned, in bounds).
        unsafe {
            head.as_ptr().write(Head {
                layout,
                ops: ops.len(),
                order_len: 0,
                table_at,
                order_at,
                group: Group::new(),
            });
            let table = base.add(table_at).cast::<Slot<'a>>();
            for i in 0..ops.len() {
                table.add(i).write(None);
            }
        }
        let mut nodes = Nodes {
            head,
            _own: PhantomData,
        };
        // Taken from the block's pointer, not through a reference to the head: the
        // nodes keep it for as long as the block lives.
        // SAFETY: the head was written just above.
        let group: *const Group = unsafe { addr_of!((*head.as_ptr()).group) };
        plan(ops, |i, e, at| {
            // The group outlives the node: both are dropped with the block, the nodes
            // first. The entry is filled only once the node is built.
            // SAFETY: `at` is the offset `plan` gave this operation's node layout in
            // the block (aligned for it, in bounds, used by no other node).
            unsafe {
                let node = e.handle.node_in(base.add(at), kind, group, i);
                base.add(table_at)
                    .cast::<Slot<'a>>()
                    .add(i)
                    .write(Some(node));
            }
        });
        let order = nodes.order_room();
        let mut len = 0;
        for (i, e) in ops.iter().enumerate() {
            if e.is_some() {
                order[len] = i;
                len += 1;
            }
        }
        nodes.set_order_len(len);
        nodes
    }

    fn head(&self) -> &Head {
        // SAFETY: the head was written at `new` and lives as long as `self`.
        unsafe { self.head.as_ref() }
    }

    /// Written through the block's pointer: a `&mut Head` would also cover the group,
    /// which the nodes reach through pointers of their own.
    fn set_order_len(&mut self, len: usize) {
        // SAFETY: the head lives as long as `self`; `&mut self` keeps every other
        // reader of `order_len` away.
        unsafe { addr_of_mut!((*self.head.as_ptr()).order_len).write(len) }
    }

    pub(super) fn group(&self) -> &Group {
        &self.head().group
    }

    /// The address `offset` bytes into the block, as a `U` (an offset `new` gave a
    /// part of the block).
    fn part<U>(&self, offset: usize) -> *mut U {
        self.head.as_ptr().cast::<u8>().wrapping_add(offset).cast()
    }

    fn table(&self) -> &[Slot<'a>] {
        let h = self.head();
        // SAFETY: the table is `h.ops` initialised entries at `h.table_at` (`new`),
        // written again only by `new`, before this owner was returned.
        unsafe { std::slice::from_raw_parts(self.part(h.table_at), h.ops) }
    }

    /// The node of operation `i` (`None`: no such operation, or removed).
    pub(super) fn node(&self, i: usize) -> Option<&(dyn OpNode + 'a)> {
        // SAFETY: a table entry points at a node built in this block, alive until the
        // block is dropped; nodes are used through shared references only.
        self.table().get(i)?.map(|p| unsafe { &*p.as_ptr() })
    }

    /// Every node, with its operation's index.
    pub(super) fn each(&self) -> impl Iterator<Item = (usize, &(dyn OpNode + 'a))> + '_ {
        (0..self.head().ops).filter_map(|i| self.node(i).map(|n| (i, n)))
    }

    /// The whole room of the order (`ops` entries).
    fn order_room(&mut self) -> &mut [usize] {
        let (at, ops) = (self.head().order_at, self.head().ops);
        // Its entries are written before they are read (`new` fills `order_len` of
        // them, `set_order` what it keeps).
        // SAFETY: the order's room is `ops` `usize`s at `order_at`, inside the block
        // and apart from every other part; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.part(at), ops) }
    }

    /// The order of the next round: indices of operations that have a node.
    pub(super) fn order(&self) -> &[usize] {
        let h = self.head();
        // SAFETY: as `order_room`; the first `order_len` entries are written.
        unsafe { std::slice::from_raw_parts(self.part(h.order_at), h.order_len) }
    }

    pub(super) fn order_mut(&mut self) -> &mut [usize] {
        let len = self.head().order_len;
        &mut self.order_room()[..len]
    }

    /// Replaces the order with `order`'s indices that have a node (at most `ops` of
    /// them are kept).
    pub(super) fn set_order(&mut self, order: impl IntoIterator<Item = usize>) {
        let mut len = 0;
        for i in order {
            if len < self.head().ops && self.node(i).is_some() {
                self.order_room()[len] = i;
                len += 1;
            }
        }
        self.set_order_len(len);
    }
}

impl Drop for Nodes<'_> {
    fn drop(&mut self) {
        /// Drops the group and frees the block when dropped: after the nodes, also
        /// when the drop of one of them panicked (a node drops a waker clone, and a
        /// waker's drop is user code).
        struct Free(NonNull<Head>);
        impl Drop for Free {
            fn drop(&mut self) {
                let head = self.0.as_ptr();
                // SAFETY: the head lives until the block is freed, just below.
                let layout = unsafe { (*head).layout };
                // SAFETY: every node that points to the group was dropped (or leaked by
                // a second panic, which aborts); the block is freed with the layout it
                // was allocated with, once, and nothing is used after.
                unsafe {
                    std::ptr::drop_in_place(addr_of_mut!((*head).group));
                    std::alloc::dealloc(head.cast::<u8>(), layout);
                }
            }
        }
        let _free = Free(self.head);
        // SAFETY: every `Some` entry points at a node built in this block and not
        // dropped yet; only this drop drops them, once each.
        unsafe { drop_nodes(self.table()) }
    }
}

/// Drops the node of every `Some` entry of `table` in place. One whose drop panics
/// does not keep the rest from being dropped (as a slice's elements are): the others
/// are dropped as the panic passes.
///
/// # Safety
/// Every `Some` entry points at a live node that nothing uses after, dropped nowhere
/// else.
unsafe fn drop_nodes(table: &[Slot<'_>]) {
    /// The entries after the one being dropped, dropped if its drop panics.
    struct Rest<'t, 'a>(&'t [Slot<'a>]);
    impl Drop for Rest<'_, '_> {
        fn drop(&mut self) {
            // SAFETY: `drop_nodes`'s contract, for entries not reached yet.
            unsafe { drop_nodes(self.0) }
        }
    }
    for (k, p) in table.iter().enumerate() {
        if let Some(p) = p {
            let rest = Rest(&table[k + 1..]);
            // SAFETY: the contract.
            unsafe { std::ptr::drop_in_place(p.as_ptr()) };
            std::mem::forget(rest);
        }
    }
}
