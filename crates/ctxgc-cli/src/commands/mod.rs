pub mod compact;
pub mod import;
pub mod replay;
pub mod run;
pub mod serve;
pub mod summarizer;
pub mod trim;
