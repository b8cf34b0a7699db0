//! The OpenAPI document is a snapshot: any change to a route's path,
//! method, parameters or body types changes `openapi.json`, and this test
//! fails until the snapshot is regenerated and reviewed with
//! `QUEEN_UPDATE_OPENAPI=1 cargo nextest run -p queen-server --test openapi`.

use std::path::PathBuf;

fn snapshot_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("openapi.json")
}

#[test]
fn the_document_matches_the_committed_snapshot() {
    let generated = queen_server::openapi_json();
    let path = snapshot_path();
    if std::env::var_os("QUEEN_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, format!("{generated}\n")).expect("write snapshot");
    }
    let committed = std::fs::read_to_string(&path).expect("openapi.json is committed");
    assert_eq!(
        committed.trim_end(),
        generated.trim_end(),
        "the OpenAPI document drifted from crates/queen-server/openapi.json; \
         rerun with QUEEN_UPDATE_OPENAPI=1 and review the diff"
    );
}

#[test]
fn every_operation_documents_its_success_and_its_errors_with_a_code() {
    let doc: serde_json::Value = serde_json::from_str(&queen_server::openapi_json()).expect("json");
    let error_schema = &doc["components"]["schemas"]["ErrorBody"];
    assert!(error_schema["required"].as_array().expect("required").iter().any(|f| f == "error"));
    let paths = doc["paths"].as_object().expect("paths");
    // The Queen routes the official client uses, each with its method.
    for (path, method) in [
        ("/api/v1/push", "post"),
        ("/api/v1/pop/queue/{queue}", "get"),
        ("/api/v1/pop/queue/{queue}/partition/{partition}", "get"),
        ("/api/v1/ack", "post"),
        ("/api/v1/ack/batch", "post"),
        ("/api/v1/transaction", "post"),
        ("/api/v1/kv", "post"),
        ("/api/v1/kv/{ns}/{key}", "put"),
        ("/api/v1/lease/{lease}/extend", "post"),
        ("/api/v1/configure", "post"),
        ("/api/v1/dlq", "get"),
        ("/api/v1/dlq", "delete"),
        ("/api/v1/dlq/{id}/replay", "post"),
    ] {
        assert!(paths.get(path).and_then(|p| p.get(method)).is_some(), "{method} {path} is not documented");
    }
    let mut operations = 0;
    for (path, item) in paths {
        assert!(!path.contains('*'), "{path} keeps axum's catch-all syntax");
        for (method, op) in item.as_object().expect("path item") {
            operations += 1;
            let responses = op["responses"].as_object().expect("responses");
            assert!(
                responses.keys().any(|s| s.starts_with('2')),
                "{method} {path} documents no success answer"
            );
            if path.starts_with("/api/") {
                for (status, answer) in responses.iter().filter(|(s, _)| !s.starts_with('2')) {
                    let schema = &answer["content"]["application/json"]["schema"]["$ref"];
                    assert!(
                        schema.as_str().is_some_and(|r| r.ends_with("ErrorBody")),
                        "{method} {path} answers {status} without an error body"
                    );
                }
            }
            // Every path parameter of the template is declared.
            for name in path.split('{').skip(1).filter_map(|s| s.split('}').next()) {
                let declared = op["parameters"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().any(|p| p["name"] == name && p["in"] == "path"));
                assert!(declared, "{method} {path} does not declare its path parameter {name}");
            }
        }
    }
    assert!(operations >= 40, "only {operations} operations documented");
}
