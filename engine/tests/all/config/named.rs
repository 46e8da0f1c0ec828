//! A pipeline loaded from text, named by its caller.

use warpline_engine::{Loader, Registry};

use super::GOOD;

#[test]
fn a_pipeline_given_as_text_can_be_named() {
    let registry = Registry::with_builtins();
    let e = Loader::from_toml_str(&GOOD.replace("count = 10", "count = 0\nsize = \"huge\""))
        .named("job-7")
        .load(&registry)
        .unwrap_err();
    assert_eq!(e.origin, "job-7");
    assert!(e.to_string().starts_with("job-7: 1 problem"), "{e}");
    let p = Loader::from_toml_str(GOOD)
        .named("job-7")
        .load(&registry)
        .unwrap();
    assert_eq!(p.name(), "job-7");
    // A `name` in the file wins.
    let p = Loader::from_toml_str(&GOOD.replace("[pipeline]", "[pipeline]\nname = \"mine\""))
        .named("job-7")
        .load(&registry)
        .unwrap();
    assert_eq!(p.name(), "mine");
}
