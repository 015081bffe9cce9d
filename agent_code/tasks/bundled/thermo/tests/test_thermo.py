import pytest

from thermo import celsius_to_fahrenheit, fahrenheit_to_celsius, kelvin_to_celsius


def test_celsius_to_fahrenheit():
    assert celsius_to_fahrenheit(100) == 212


def test_fahrenheit_to_celsius_boiling():
    assert fahrenheit_to_celsius(212) == pytest.approx(100)


def test_fahrenheit_to_celsius_body_temperature():
    assert fahrenheit_to_celsius(98.6) == pytest.approx(37)


def test_round_trip():
    assert fahrenheit_to_celsius(celsius_to_fahrenheit(21.5)) == pytest.approx(21.5)


def test_kelvin_to_celsius():
    assert kelvin_to_celsius(273.15) == pytest.approx(0)
