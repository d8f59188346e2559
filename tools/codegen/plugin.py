"""protoc plugin entry point: reads a CodeGeneratorRequest on stdin, writes the response."""

from __future__ import annotations

import sys
from pathlib import Path

from google.protobuf.compiler import plugin_pb2

from codegen import crd, docs, python_model, schema

# The outputs of a resource that names none (schema_options.Resource's python_module, docs_path).
PYTHON_MODULE = "torchjob.api.types"
API_DOCS = "docs/api.md"
DOCS_APPENDIX_DIR = "proto/docs"


def generate(request: plugin_pb2.CodeGeneratorRequest) -> plugin_pb2.CodeGeneratorResponse:
    response = plugin_pb2.CodeGeneratorResponse(
        supported_features=plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    )
    files = {fd.name: fd for fd in request.proto_file}
    for name in request.file_to_generate:
        if not schema.declares_resource(files[name]):
            continue  # messages shared by the resources of files that import it
        imported = [files[dep] for dep in files[name].dependency if dep in request.file_to_generate]
        api = schema.read(files[name], imported)
        res = api.resource
        module = res.python_module or PYTHON_MODULE
        appendix_dir = res.docs_appendix_dir if res.docs_path else DOCS_APPENDIX_DIR
        outputs = {
            f"crds/{res.group}_{res.plural}.yaml": crd.render(api),
            python_path(module): python_model.render(api),
            res.docs_path or API_DOCS: docs.render(api, _appendix(appendix_dir), appendix_dir),
        }
        for path, content in outputs.items():
            response.file.add(name=path, content=content)
    return response


def python_path(module: str) -> str:
    """The file of a module of the torchjob package, from the repository root."""
    if module.split(".")[0] != "torchjob":
        raise ValueError(f"python_module {module!r} is not in the torchjob package")
    return "services/" + module.replace(".", "/") + ".py"


def _appendix(directory: str) -> str:
    if not directory:
        return ""
    path = Path(directory)
    parts = sorted(path.glob("*.md")) if path.is_dir() else []
    return "\n\n".join(p.read_text() for p in parts)


def main() -> None:
    request = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    sys.stdout.buffer.write(generate(request).SerializeToString())


if __name__ == "__main__":
    main()
