"""One line from a pydantic ValidationError: the first error's location and what to do (`resources.gpu: must be
>= 0, got -1`). The full error list goes to the task log, not into the message."""

from __future__ import annotations

import difflib
import json
from typing import TYPE_CHECKING, Any

from operators.storage.location import SCHEME_HINT

if TYPE_CHECKING:  # pydantic only where an error is explained: SpecError is raised by readers that never validate
    from pydantic import BaseModel, ValidationError

_REQUIRED_HINTS = {
    "source_dir": f"give an object storage URI ({SCHEME_HINT}) or a local path",
    "output_path": f"give an object storage URI ({SCHEME_HINT}) or a local path",
}


class SpecError(ValueError):
    """A job spec field is invalid; the message names the field and what to do."""

    def __init__(self, field_name: str, problem: str):
        self.field = field_name
        self.problem = problem
        super().__init__(f"{field_name}: {problem}")


def location(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(spec)"


def _show(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _known_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The fields of the (nested) model at `loc`, for "unknown field" messages."""
    from pydantic import BaseModel  # lazy: see above

    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return []
        annotation = field.annotation
        for candidate in (annotation, *getattr(annotation, "__args__", ())):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                model = candidate
                break
        else:
            return []
    return list(model.model_fields)


def problem_of(error: dict[str, Any], model: type[BaseModel], within: tuple[str, ...] = ()) -> tuple[str, str]:
    """(field, problem) of one pydantic error of `model`; `within`: where that model sits in the spec (a backend's
    options section is validated by its own model)."""
    kind, ctx, relative = error["type"], error.get("ctx") or {}, tuple(error["loc"])
    loc = (*within, *relative)
    value = error.get("input")
    field = ctx.get("field") or location(loc)
    if kind == "spec":
        return field, str(ctx.get("msg"))
    if kind == "missing":
        hint = _REQUIRED_HINTS.get(field)
        return field, f"is required: {hint}" if hint else "is required"
    if kind == "extra_forbidden":
        known = _known_fields(model, relative[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        where = f"; did you mean '{close[0]}'?" if close else f"; known fields: {', '.join(known)}" if known else ""
        what = "a job spec field" if len(loc) == 1 else f"a field of {location(loc[:-1])}"
        return field, f"is not {what}{where}"
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in bounds:
        bound = next(v for k, v in ctx.items() if k in ("ge", "gt", "le", "lt"))
        return field, f"must be {bounds[kind]} {bound}, got {_show(value)}"
    if kind in ("enum", "literal_error"):
        expected = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
        return field, f"{_show(value)} is not one of {expected}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return field, f"must be an integer, got {_show(value)}"
    if kind in ("float_type", "float_parsing"):
        return field, f"must be a number, got {_show(value)}"
    if kind in ("bool_type", "bool_parsing"):
        return field, f"must be true or false, got {_show(value)}"
    if kind in ("string_type",):
        return field, f"must be a string, got {_show(value)}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return field, f"must be an object (JSON {{...}}), got {_show(value)}"
    if kind in ("list_type", "tuple_type"):
        return field, f"must be a list, got {_show(value)}"
    if kind == "string_too_long":
        return field, f"is {len(str(value))} characters; at most {ctx.get('max_length')}"
    if kind == "string_too_short":
        return field, "must not be empty"
    if kind == "too_long":
        return field, f"has {ctx.get('actual_length')} items; at most {ctx.get('max_length')}"
    message = str(error.get("msg") or kind)
    return field, message.removeprefix("Value error, ")


def detail_lines(errors: list[dict[str, Any]], within: tuple[str, ...] = ()) -> list[str]:
    """Every problem pydantic found, one line each, for the log; an error standing for a nested model's (a backend's
    options section) brings that model's lines."""
    lines = []
    for error in errors:
        nested = (error.get("ctx") or {}).get("details")
        lines.extend(nested or [f"{location((*within, *error['loc']))}: {error['msg']}"])
    return lines


def first_error(err: ValidationError, model: type[BaseModel]) -> SpecError:
    errors = err.errors(include_url=False)
    # A union tries each member; its errors nest one level deeper than the field: name the field.
    field, problem = problem_of(errors[0], model)
    spec_error = SpecError(field, problem)
    spec_error.details = detail_lines(errors)
    return spec_error
