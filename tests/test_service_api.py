"""The service's OpenAPI document: valid OpenAPI 3.1, and the same routes as the app serves, both ways."""

from openapi_spec_validator import validate

from witty_profiler.service.app import Service, build_app
from witty_profiler.service.config import ServiceConfig
from witty_profiler.service.routes import openapi_document


def served_and_documented(tmp_path):
    config = ServiceConfig()
    config.storage.state_dir = str(tmp_path)
    service = Service(config, tmp_path)
    app = build_app(service, None).app  # inside the HTTP guard
    served = set()
    for route in app.router.routes:
        methods = getattr(route, "methods", None) or {"GET", "POST", "DELETE"}  # /mcp takes what MCP sends
        served |= {(route.path, m.lower()) for m in methods if m != "HEAD"}
    doc = openapi_document(service.api_routes)
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    return served, documented, doc


def test_the_document_is_valid_openapi(tmp_path):
    validate(served_and_documented(tmp_path)[2])


def test_every_served_route_is_documented_and_every_documented_one_served(tmp_path):
    served, documented, _ = served_and_documented(tmp_path)
    assert served == documented
    assert ("/mcp", "post") in served and ("/api/v1/compare", "get") in served


def test_every_operation_says_what_it_does_and_its_path_parameters(tmp_path):
    doc = served_and_documented(tmp_path)[2]
    for path, ops in doc["paths"].items():
        for op in ops.values():
            assert op["summary"] and op["operationId"]
            in_path = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert in_path == {part[1:-1] for part in path.split("/") if part.startswith("{")}
