//! Attribute macros for the weft runtime: `#[weft::main]` and `#[weft::test]`.
//!
//! Use them through the `weft` crate, which re-exports both. They turn an
//! `async fn` into a plain `fn` whose body is run on a fresh weft runtime:
//!
//! ```ignore
//! #[weft::main]
//! async fn main() {
//!     println!("{}", weft::spawn(async { 6 * 7 }).await.unwrap());
//! }
//! ```
//!
//! expands to
//!
//! ```ignore
//! fn main() {
//!     ::weft::Builder::new()
//!         .build()
//!         .expect("weft: failed to build the runtime")
//!         .block_on(async move {
//!             println!("{}", weft::spawn(async { 6 * 7 }).await.unwrap());
//!         })
//! }
//! ```
//!
//! This crate has no dependencies: the tokens are handled with the bare
//! `proc_macro` API. Mistakes are reported with `compile_error!`, never a panic.

use proc_macro::{Delimiter, Group, Ident, Literal, Punct, Spacing, Span, TokenStream, TokenTree};

/// Runs an `async fn` (usually `main`) on a new weft runtime.
///
/// The function keeps its name, attributes, visibility and return type; it
/// loses `async`. Its body becomes `async move { body }`, handed to
/// `Runtime::block_on`, so the runtime lives exactly as long as the call.
///
/// The only argument is `worker_threads = N` (a positive integer literal);
/// without it the runtime uses its default worker count (`WEFT_WORKERS`, or
/// one per core).
///
/// ```ignore
/// #[weft::main(worker_threads = 4)]
/// async fn main() -> std::io::Result<()> {
///     let total: u64 = weft::spawn(async { (1..=100).sum() }).await.unwrap();
///     println!("{total}");
///     Ok(())
/// }
/// ```
///
/// # Errors
///
/// These do not compile (each gives a `compile_error!` with an explanation):
///
/// ```compile_fail
/// #[weft_macros::main] // not an `async fn`
/// fn main() {}
/// ```
///
/// ```compile_fail
/// #[weft_macros::main(workers = 2)] // unknown argument
/// async fn main() {}
/// ```
///
/// ```compile_fail
/// #[weft_macros::main(worker_threads = 0)] // must be at least 1
/// async fn main() {}
/// ```
#[proc_macro_attribute]
pub fn main(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(args, item, "main")
}

/// Like [`macro@main`], for tests: the function also gets `#[test]`.
///
/// Each test builds its own runtime, so tests stay independent.
///
/// ```ignore
/// #[weft::test]
/// async fn spawns() {
///     assert_eq!(weft::spawn(async { 1 + 1 }).await.unwrap(), 2);
/// }
///
/// #[weft::test(worker_threads = 1)]
/// async fn one_worker() {
///     assert_eq!(weft::Handle::current().stats().num_workers, 1);
/// }
/// ```
///
/// Other attributes such as `#[should_panic]` or `#[ignore]` are kept:
///
/// ```ignore
/// #[weft::test]
/// #[should_panic(expected = "boom")]
/// async fn panics() {
///     panic!("boom");
/// }
/// ```
///
/// ```compile_fail
/// #[weft_macros::test] // not an `async fn`
/// fn not_async() {}
/// ```
#[proc_macro_attribute]
pub fn test(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(args, item, "test")
}

/// A message to report with `compile_error!` at `span`.
struct Error {
    span: Span,
    msg: String,
}

impl Error {
    fn new(span: Span, msg: impl Into<String>) -> Error {
        Error {
            span,
            msg: msg.into(),
        }
    }

    /// `::core::compile_error!("msg");`, pointing at the offending tokens.
    fn into_tokens(self) -> TokenStream {
        let msg = TokenTree::Literal(with_span(Literal::string(&self.msg), self.span));
        let tokens = [
            punct(':', Spacing::Joint),
            punct(':', Spacing::Alone),
            TokenTree::Ident(Ident::new("core", self.span)),
            punct(':', Spacing::Joint),
            punct(':', Spacing::Alone),
            TokenTree::Ident(Ident::new("compile_error", self.span)),
            punct('!', Spacing::Alone),
            TokenTree::Group(Group::new(Delimiter::Parenthesis, msg.into())),
            punct(';', Spacing::Alone),
        ];
        tokens
            .into_iter()
            .map(|mut tt| {
                tt.set_span(self.span);
                tt
            })
            .collect()
    }
}

fn punct(ch: char, spacing: Spacing) -> TokenTree {
    TokenTree::Punct(Punct::new(ch, spacing))
}

fn with_span(mut lit: Literal, span: Span) -> Literal {
    lit.set_span(span);
    lit
}

fn expand(args: TokenStream, item: TokenStream, which: &str) -> TokenStream {
    // A bad argument still expands the function (with default settings), so
    // the only error the user sees is ours.
    let (workers, arg_error) = match parse_args(args, which) {
        Ok(workers) => (workers, None),
        Err(e) => (None, Some(e)),
    };
    let mut out = TokenStream::new();
    match rewrite(item.clone(), workers, which) {
        Ok(function) => {
            out.extend(arg_error.map(Error::into_tokens));
            out.extend(function);
        }
        Err(e) => {
            out.extend(e.into_tokens());
            out.extend(item);
        }
    }
    out
}

/// Parses the attribute arguments: nothing, or `worker_threads = N`.
fn parse_args(args: TokenStream, which: &str) -> Result<Option<usize>, Error> {
    let mut tokens = args.into_iter();
    let mut workers = None;
    while let Some(tt) = tokens.next() {
        let name = match &tt {
            TokenTree::Ident(ident) => ident.to_string(),
            _ => {
                return Err(Error::new(
                    tt.span(),
                    format!("#[weft::{which}]: expected `worker_threads = N`"),
                ))
            }
        };
        if name != "worker_threads" {
            return Err(Error::new(
                tt.span(),
                format!("#[weft::{which}]: unknown argument `{name}`; the only supported argument is `worker_threads = N`"),
            ));
        }
        if workers.is_some() {
            return Err(Error::new(
                tt.span(),
                format!("#[weft::{which}]: `worker_threads` is given twice"),
            ));
        }
        match tokens.next() {
            Some(TokenTree::Punct(p)) if p.as_char() == '=' => {}
            other => {
                let span = other.map_or(tt.span(), |t| t.span());
                return Err(Error::new(
                    span,
                    format!("#[weft::{which}]: expected `=` after `worker_threads`"),
                ));
            }
        }
        let value = tokens.next();
        workers = Some(parse_count(value.as_ref(), tt.span(), which)?);
        match tokens.next() {
            None => break,
            Some(TokenTree::Punct(p)) if p.as_char() == ',' => {}
            Some(other) => {
                return Err(Error::new(
                    other.span(),
                    format!("#[weft::{which}]: expected `,` or the end of the arguments"),
                ));
            }
        }
    }
    Ok(workers)
}

/// Parses the `N` of `worker_threads = N`: a positive integer literal (`4`, `4usize`, `1_000`).
fn parse_count(value: Option<&TokenTree>, fallback: Span, which: &str) -> Result<usize, Error> {
    let span = value.map_or(fallback, |t| t.span());
    let bad = || {
        Error::new(
            span,
            format!("#[weft::{which}]: `worker_threads` must be a positive integer literal, e.g. `worker_threads = 4`"),
        )
    };
    let Some(TokenTree::Literal(lit)) = value else {
        return Err(bad());
    };
    let text = lit.to_string().replace('_', "");
    let digits = text.strip_suffix("usize").unwrap_or(&text);
    match digits.parse::<usize>() {
        Ok(0) => Err(Error::new(
            span,
            format!("#[weft::{which}]: `worker_threads` must be at least 1, not 0"),
        )),
        Ok(n) => Ok(n),
        Err(_) => Err(bad()),
    }
}

fn is_ident(tt: &TokenTree, word: &str) -> bool {
    matches!(tt, TokenTree::Ident(ident) if ident.to_string() == word)
}

/// Turns `[attrs] [vis] async fn name() [-> R] { body }` into the blocking function.
fn rewrite(item: TokenStream, workers: Option<usize>, which: &str) -> Result<TokenStream, Error> {
    let mut tokens: Vec<TokenTree> = item.into_iter().collect();
    let not_async_fn = |span| {
        Error::new(
            span,
            format!("#[weft::{which}] can only be used on an `async fn`"),
        )
    };

    let body = match tokens.pop() {
        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => g,
        other => return Err(not_async_fn(other.map_or(Span::call_site(), |t| t.span()))),
    };
    // Attributes are `#` followed by a `[...]` group, so a top-level `fn` is the keyword.
    let fn_pos = match tokens.iter().position(|t| is_ident(t, "fn")) {
        Some(pos) => pos,
        None => return Err(not_async_fn(body.span())),
    };
    let Some(async_pos) = tokens[..fn_pos].iter().position(|t| is_ident(t, "async")) else {
        return Err(Error::new(
            tokens[fn_pos].span(),
            format!("#[weft::{which}] can only be used on an `async fn`: add `async` before `fn`"),
        ));
    };
    tokens.remove(async_pos);
    let fn_pos = fn_pos - 1;

    // After `fn name` must come an empty parameter list.
    match tokens.get(fn_pos + 2) {
        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis => {
            if !g.stream().is_empty() {
                return Err(Error::new(
                    g.span(),
                    format!("#[weft::{which}]: the function cannot take arguments"),
                ));
            }
        }
        Some(other) => {
            return Err(Error::new(
                other.span(),
                format!("#[weft::{which}]: the function cannot be generic"),
            ));
        }
        None => return Err(not_async_fn(body.span())),
    }

    let mut out = TokenStream::new();
    if which == "test" {
        out.extend(
            "#[::core::prelude::v1::test]"
                .parse::<TokenStream>()
                .unwrap(),
        );
    }
    out.extend(tokens);

    let builder = match workers {
        Some(n) => format!("::weft::Builder::new().worker_threads({n})"),
        None => "::weft::Builder::new()".to_string(),
    };
    let mut call: TokenStream =
        format!("{builder}.build().expect(\"weft: failed to build the runtime\").block_on")
            .parse()
            .unwrap();
    let mut future: TokenStream = "async move".parse().unwrap();
    future.extend([TokenTree::Group(body.clone())]);
    call.extend([TokenTree::Group(Group::new(Delimiter::Parenthesis, future))]);

    let mut new_body = Group::new(Delimiter::Brace, call);
    new_body.set_span(body.span());
    out.extend([TokenTree::Group(new_body)]);
    Ok(out)
}
