//! Which wire format each API has: the one place that lists them (adding an API adds a line
//! here and its [`WireApi`] implementation).

use crate::Api;
use crate::gemini::Gemini;
use crate::wire_api::WireApi;
use crate::wire_apis::{ChatCompletions, Messages, Responses};

impl Api {
    /// Every API, in the order metrics list them.
    pub const ALL: [Api; 4] = [
        Api::ChatCompletions,
        Api::Responses,
        Api::Messages,
        Api::Gemini,
    ];

    /// The API's wire format.
    pub fn wire(self) -> &'static dyn WireApi {
        match self {
            Api::ChatCompletions => &ChatCompletions,
            Api::Responses => &Responses,
            Api::Messages => &Messages,
            Api::Gemini => &Gemini,
        }
    }
}
