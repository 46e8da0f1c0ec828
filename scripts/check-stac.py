#!/usr/bin/env python3
"""Checks a STAC collection that warpline wrote, offline.

    check-stac.py COLLECTION.json [SCHEMAS_DIR] [ITEMS.json]

- the collection and each item it links validate against the JSON schemas
  of the STAC version and extensions they declare, read from SCHEMAS_DIR
  (default: tests/data/stac-schemas beside this script): no schema is
  fetched, every $ref resolves to a vendored file or the check fails;
- pystac reads the collection and its items back (Collection.from_file,
  get_items), and each item's data asset exists beside it with the size
  and sha2-256 multihash its file extension fields say;
- with ITEMS.json (the write stage's `item_collection`): pystac reads it as
  an ItemCollection, each feature validates, its data asset (relative to
  that file) has the size and checksum it says, and it holds exactly the
  items the collection links.

Prints one line per document and `stac: N passed, M failed` last; exits 1
when anything failed. Needs `jsonschema` and `pystac` (scripts/stac-check.sh
makes a venv with them).
"""

import hashlib
import json
import sys
from pathlib import Path

import jsonschema
import pystac
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT7

HERE = Path(__file__).resolve().parent


def registry(root: Path) -> Registry:
    """Every vendored schema under its $id (with and without a trailing #)."""
    resources = []
    for path in sorted(root.rglob("*.json")):
        schema = json.loads(path.read_text())
        sid = schema.get("$id")
        if not sid:
            continue
        resource = Resource.from_contents(schema, default_specification=DRAFT7)
        for uri in {sid, sid.rstrip("#")}:
            resources.append((uri, resource))
    return Registry().with_resources(resources)


def schemas_of(doc: dict) -> list:
    """The core schema of the document's type and version, then its extensions'."""
    version = doc["stac_version"]
    kind = {"Feature": "item-spec/json-schema/item.json",
            "Collection": "collection-spec/json-schema/collection.json",
            "Catalog": "catalog-spec/json-schema/catalog.json"}[doc["type"]]
    return [f"https://schemas.stacspec.org/v{version}/{kind}"] + list(doc.get("stac_extensions", []))


def validate(doc: dict, reg: Registry) -> list:
    errors = []
    for uri in schemas_of(doc):
        try:
            schema = reg.contents(uri)
        except (KeyError, Unresolvable):
            errors.append(f"schema {uri} is not vendored")
            continue
        validator = jsonschema.Draft7Validator(schema, registry=reg)
        try:
            for e in validator.iter_errors(doc):
                errors.append(f"{uri}: {e.json_path}: {e.message}")
        except Unresolvable as e:
            errors.append(f"{uri}: unresolvable $ref {e}")
    return errors


def check_asset(item_path: Path, item: dict) -> list:
    asset = item["assets"]["data"]
    data = (item_path.parent / asset["href"]).resolve()
    if not data.is_file():
        return [f"asset {asset['href']} is missing"]
    body = data.read_bytes()
    errors = []
    if asset.get("file:size") != len(body):
        errors.append(f"file:size {asset.get('file:size')} but the file has {len(body)} bytes")
    want = "1220" + hashlib.sha256(body).hexdigest()
    if asset.get("file:checksum") != want:
        errors.append(f"file:checksum {asset.get('file:checksum')} but the file's is {want}")
    return errors


def main() -> int:
    collection_path = Path(sys.argv[1]).resolve()
    root = Path(sys.argv[2]) if len(sys.argv) > 2 else HERE.parent / "tests/data/stac-schemas"
    reg = registry(root)
    passed = failed = 0

    def report(name: str, errors: list) -> None:
        nonlocal passed, failed
        if errors:
            failed += 1
            print(f"FAIL {name}")
            for e in errors:
                print(f"  {e}")
        else:
            passed += 1
            print(f"ok   {name}")

    collection = json.loads(collection_path.read_text())
    report(str(collection_path), validate(collection, reg))
    read_back = pystac.Collection.from_file(str(collection_path))
    by_id = {i.id: i for i in read_back.get_items()}
    links = [l["href"] for l in collection["links"] if l["rel"] == "item"]
    for href in links:
        path = (collection_path.parent / href).resolve()
        item = json.loads(path.read_text())
        errors = validate(item, reg) + check_asset(path, item)
        if item["id"] not in by_id:
            errors.append("pystac did not read it back from the collection")
        else:
            back = by_id[item["id"]]
            if back.assets["data"].extra_fields.get("file:checksum") != item["assets"]["data"]["file:checksum"]:
                errors.append("pystac read another checksum")
        report(str(path), errors)
    if len(by_id) != len(links):
        report("pystac items", [f"{len(by_id)} items read back, {len(links)} links"])
    if len(sys.argv) > 3:
        items_path = Path(sys.argv[3]).resolve()
        features = json.loads(items_path.read_text())["features"]
        for feature in features:
            errors = validate(feature, reg) + check_asset(items_path, feature)
            report(f"{items_path} {feature['id']}", errors)
        back = pystac.ItemCollection.from_file(str(items_path))
        ids = sorted(i.id for i in back)
        if ids != sorted(by_id):
            report(str(items_path), [f"items {ids}, the collection links {sorted(by_id)}"])
    print(f"stac: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
