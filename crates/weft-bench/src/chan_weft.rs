//! weft's channels (`weft::chan`) behind the `chan` suite's traits: one
//! channel for every context, so the same type serves the `threads_*` and
//! `fibers_*` cases ([`WeftChan`], blocking calls: a thread blocks, a fiber
//! suspends) and the `tasks_*` cases ([`WeftAsync`], `.await`).

use weft::chan::{Receiver, Select, Sender};

use crate::chan_peers::{close_at, AsyncChan, BlockingChan, Msg};

/// weft's channel with its blocking calls: `send_blocking`,
/// `recv_blocking`, `Select::select`.
pub struct WeftChan;

/// weft's channel with its async calls: `send(v).await`, `recv().await`,
/// `Select::select_async().await`.
pub struct WeftAsync;

fn new(cap: Option<usize>) -> (Sender<Msg>, Receiver<Msg>) {
    match cap {
        Some(cap) => weft::chan::bounded(cap),
        None => weft::chan::unbounded(),
    }
}

/// A select over the receives on `rxs[i]` for `i` in `open`.
fn recv_select<'a>(rxs: &'a [Receiver<Msg>], open: &[usize]) -> Select<'a> {
    let mut sel = Select::new();
    for &i in open {
        sel.recv(&rxs[i]);
    }
    sel
}

/// A select over the sends on `txs[i]` for `i` in `open`.
fn send_select<'a>(txs: &'a [Sender<Msg>], open: &[usize]) -> Select<'a> {
    let mut sel = Select::new();
    for &i in open {
        sel.send(&txs[i]);
    }
    sel
}

/// 1 if the selected operation `k` (a position in `open`) moved a message,
/// else 0 after removing its channel from `open`.
fn outcome<E>(open: &mut Vec<usize>, k: usize, r: Result<(), E>) -> usize {
    match r {
        Ok(()) => 1,
        Err(_) => {
            close_at(open, k);
            0
        }
    }
}

impl BlockingChan for WeftChan {
    const NAME: &'static str = "weft";
    const MPMC: bool = true;
    const SELECT: bool = true;
    type Tx = Sender<Msg>;
    type Rx = Receiver<Msg>;

    fn new(cap: Option<usize>) -> Option<(Self::Tx, Self::Rx)> {
        Some(new(cap))
    }

    fn clone_tx(tx: &Self::Tx) -> Self::Tx {
        tx.clone()
    }

    fn clone_rx(rx: &Self::Rx) -> Self::Rx {
        rx.clone()
    }

    fn send(tx: &Self::Tx, m: Msg) -> bool {
        tx.send_blocking(m).is_ok()
    }

    fn recv(rx: &Self::Rx) -> Option<Msg> {
        rx.recv_blocking().ok()
    }

    fn select_recv(rxs: &[Self::Rx], open: &mut Vec<usize>) -> usize {
        let mut sel = recv_select(rxs, open);
        let oper = sel.select();
        let k = oper.index();
        let r = oper.recv(&rxs[open[k]]).map(drop);
        outcome(open, k, r)
    }

    fn select_send(txs: &[Self::Tx], open: &mut Vec<usize>, m: Msg) -> usize {
        let mut sel = send_select(txs, open);
        let oper = sel.select();
        let k = oper.index();
        let r = oper.send(&txs[open[k]], m);
        outcome(open, k, r)
    }
}

impl AsyncChan for WeftAsync {
    const NAME: &'static str = "weft";
    const MPMC: bool = true;
    const SELECT: bool = true;
    type Tx = Sender<Msg>;
    type Rx = Receiver<Msg>;

    fn new(cap: Option<usize>) -> Option<(Self::Tx, Self::Rx)> {
        Some(new(cap))
    }

    fn clone_tx(tx: &Self::Tx) -> Self::Tx {
        tx.clone()
    }

    fn clone_rx(rx: &Self::Rx) -> Self::Rx {
        rx.clone()
    }

    async fn send(tx: &Self::Tx, m: Msg) -> bool {
        tx.send(m).await.is_ok()
    }

    async fn recv(rx: &mut Self::Rx) -> Option<Msg> {
        rx.recv().await.ok()
    }

    async fn select_recv(rxs: &mut [Self::Rx], open: &mut Vec<usize>) -> usize {
        let rxs = &*rxs;
        let mut sel = recv_select(rxs, open);
        let oper = sel.select_async().await;
        let k = oper.index();
        let r = oper.recv(&rxs[open[k]]).map(drop);
        outcome(open, k, r)
    }

    async fn select_send(txs: &[Self::Tx], open: &mut Vec<usize>, m: Msg) -> usize {
        let mut sel = send_select(txs, open);
        let oper = sel.select_async().await;
        let k = oper.index();
        let r = oper.send(&txs[open[k]], m);
        outcome(open, k, r)
    }
}
