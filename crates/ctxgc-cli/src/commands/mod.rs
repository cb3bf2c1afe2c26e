pub mod compact;
pub mod import;
pub mod run;
pub mod trim;
