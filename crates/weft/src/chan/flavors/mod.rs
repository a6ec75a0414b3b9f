pub(crate) mod ring;
