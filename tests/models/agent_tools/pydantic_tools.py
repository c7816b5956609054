"""Tool parameter schemas as pydantic writes them (``model_json_schema``): titles on every
property, ``default``, ``anyOf`` with null for optional fields, ``$defs`` for nested models
and enums, constrained fields. Agent frameworks (OpenAI Agents SDK, LangChain, LlamaIndex,
MCP's Python SDK) send tools this way."""

from __future__ import annotations

from datetime import date
from enum import Enum
from typing import Literal, Optional, Union

from pydantic import BaseModel, Field


class Unit(str, Enum):
    celsius = "celsius"
    fahrenheit = "fahrenheit"


class GetWeather(BaseModel):
    """Get the weather forecast for a city."""

    city: str = Field(description="City name, e.g. Paris")
    unit: Unit = Unit.celsius
    days: Optional[int] = Field(default=None, ge=1, le=14)


class Address(BaseModel):
    street: str
    city: str
    postcode: str = Field(pattern=r"^[0-9]{5}$")


class CreateContact(BaseModel):
    """Add a person to the address book."""

    name: str = Field(min_length=1, max_length=60)
    email: Optional[str] = None
    birthday: Optional[date] = None
    address: Optional[Address] = None
    tags: list[str] = Field(default_factory=list, max_length=5)


class Circle(BaseModel):
    kind: Literal["circle"] = "circle"
    radius: float = Field(gt=0)


class Rectangle(BaseModel):
    kind: Literal["rectangle"] = "rectangle"
    width: float = Field(gt=0)
    height: float = Field(gt=0)


class ShapeArea(BaseModel):
    """Compute the area of a shape."""

    shape: Union[Circle, Rectangle] = Field(discriminator="kind")


class BookFlight(BaseModel):
    """Book a flight."""

    origin: str = Field(min_length=3, max_length=3, description="IATA code")
    destination: str = Field(min_length=3, max_length=3)
    passengers: int = Field(default=1, ge=1, le=9)
    cabin: Literal["economy", "business", "first"] = "economy"
    return_date: Optional[date] = None


class Step(BaseModel):
    title: str
    minutes: Optional[int] = Field(default=None, ge=0)


class PlanTrip(BaseModel):
    """Plan the steps of a trip."""

    steps: list[Step] = Field(min_length=1, max_length=4)
    budget_eur: Optional[float] = Field(default=None, multiple_of=0.01, ge=0)


MODELS = [GetWeather, CreateContact, ShapeArea, BookFlight, PlanTrip]


def pydantic_tools() -> dict[str, dict]:
    """{function name: parameters schema} from each model's ``model_json_schema()``."""
    return {model.__name__: model.model_json_schema() for model in MODELS}
