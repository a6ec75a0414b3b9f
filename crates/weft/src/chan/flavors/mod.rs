pub(crate) mod list;
