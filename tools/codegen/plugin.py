"""protoc plugin entry point: reads a CodeGeneratorRequest on stdin, writes the response."""

from __future__ import annotations

import sys
from pathlib import Path

from google.protobuf.compiler import plugin_pb2

from codegen import crd, docs, python_model, schema

PYTHON_MODEL = "services/torchjob/api/types.py"
API_DOCS = "docs/api.md"
DOCS_APPENDIX_DIR = Path("proto/docs")


def generate(request: plugin_pb2.CodeGeneratorRequest) -> plugin_pb2.CodeGeneratorResponse:
    response = plugin_pb2.CodeGeneratorResponse(
        supported_features=plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    )
    files = {fd.name: fd for fd in request.proto_file}
    for name in request.file_to_generate:
        api = schema.read(files[name])
        res = api.resource
        outputs = {
            f"crds/{res.group}_{res.plural}.yaml": crd.render(api),
            PYTHON_MODEL: python_model.render(api),
            API_DOCS: docs.render(api, _appendix()),
        }
        for path, content in outputs.items():
            response.file.add(name=path, content=content)
    return response


def _appendix() -> str:
    parts = sorted(DOCS_APPENDIX_DIR.glob("*.md")) if DOCS_APPENDIX_DIR.is_dir() else []
    return "\n\n".join(p.read_text() for p in parts)


def main() -> None:
    request = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    sys.stdout.buffer.write(generate(request).SerializeToString())


if __name__ == "__main__":
    main()
