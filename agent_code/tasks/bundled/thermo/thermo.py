"""Temperature conversions for the weather station dashboard."""

FREEZING_F = 32.0


def celsius_to_fahrenheit(celsius: float) -> float:
    return celsius * 9 / 5 + FREEZING_F


def fahrenheit_to_celsius(fahrenheit: float) -> float:
    return (fahrenheit - FREEZING_F) * 9 / 5


def kelvin_to_celsius(kelvin: float) -> float:
    if kelvin < 0:
        raise ValueError("kelvin cannot be negative")
    return kelvin - 273.15
