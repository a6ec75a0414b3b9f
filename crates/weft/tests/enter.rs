//! `Runtime::enter` / `Handle::enter`: what a plain thread makes while a guard lives
//! belongs to that runtime, not to the most recently started one.

#[test]
fn an_entered_runtime_wins_over_the_latest_one() {
    let first = weft::Builder::new().worker_threads(1).build().unwrap();
    let second = weft::Builder::new().worker_threads(1).build().unwrap();
    let on = |rt: &weft::Runtime| {
        rt.spawn(async { weft::Handle::current().stats().num_workers })
            .join()
            .unwrap()
    };
    assert_eq!(on(&first), 1);
    {
        let _g = first.enter();
        // A socket made here registers with `first`: dropping `second` leaves it alone.
        let l = weft::wait(weft::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        assert_eq!(first.stats().io_sources, 1);
        assert_eq!(second.stats().io_sources, 0);
        drop(l);
        {
            let _inner = second.enter();
            let l = weft::wait(weft::net::TcpListener::bind("127.0.0.1:0")).unwrap();
            assert_eq!(second.stats().io_sources, 1);
            drop(l);
        }
        // The inner guard ended: `first` is current again.
        let _l = weft::wait(weft::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        assert_eq!(first.stats().io_sources, 1);
    }
    assert!(weft::Handle::try_current().is_err());
    drop(second);
    drop(first);
}
