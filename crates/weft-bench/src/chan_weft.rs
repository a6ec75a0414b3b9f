//! Placeholder until `weft::chan` lands: weft takes part in no case.

use crate::chan_peers::{AsyncChan, BlockingChan, Msg};

pub struct WeftChan;
pub struct WeftAsync;

impl BlockingChan for WeftChan {
    const NAME: &'static str = "weft";
    const MPMC: bool = true;
    const SELECT: bool = true;
    type Tx = ();
    type Rx = ();
    fn new(_: Option<usize>) -> Option<((), ())> {
        None
    }
    fn clone_tx(_: &()) {}
    fn clone_rx(_: &()) {}
    fn send(_: &(), _: Msg) -> bool {
        unreachable!()
    }
    fn recv(_: &()) -> Option<Msg> {
        unreachable!()
    }
    fn select_recv(_: &[()], _: &mut Vec<usize>) -> usize {
        unreachable!()
    }
    fn select_send(_: &[()], _: &mut Vec<usize>, _: Msg) -> usize {
        unreachable!()
    }
}

impl AsyncChan for WeftAsync {
    const NAME: &'static str = "weft";
    const MPMC: bool = true;
    const SELECT: bool = true;
    type Tx = ();
    type Rx = ();
    fn new(_: Option<usize>) -> Option<((), ())> {
        None
    }
    fn clone_tx(_: &()) {}
    fn clone_rx(_: &()) {}
    async fn send(_: &(), _: Msg) -> bool {
        unreachable!()
    }
    async fn recv(_: &mut ()) -> Option<Msg> {
        unreachable!()
    }
    async fn select_recv(_: &mut [()], _: &mut Vec<usize>) -> usize {
        unreachable!()
    }
    async fn select_send(_: &[()], _: &mut Vec<usize>, _: Msg) -> usize {
        unreachable!()
    }
}
