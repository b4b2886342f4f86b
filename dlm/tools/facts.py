"""The facts table behind the `country_capital` tool (lower case, as speech recognition writes names)."""

from __future__ import annotations

CAPITALS: dict[str, str] = {
    "france": "paris", "germany": "berlin", "spain": "madrid", "italy": "rome", "portugal": "lisbon",
    "japan": "tokyo", "china": "beijing", "india": "new delhi", "canada": "ottawa", "mexico": "mexico city",
    "brazil": "brasilia", "argentina": "buenos aires", "australia": "canberra", "egypt": "cairo",
    "kenya": "nairobi", "nigeria": "abuja", "russia": "moscow", "poland": "warsaw", "sweden": "stockholm",
    "norway": "oslo", "finland": "helsinki", "denmark": "copenhagen", "ireland": "dublin",
    "united kingdom": "london", "united states": "washington", "netherlands": "amsterdam",
    "belgium": "brussels", "austria": "vienna", "switzerland": "bern", "greece": "athens",
    "turkey": "ankara", "iran": "tehran", "iraq": "baghdad", "israel": "jerusalem", "saudi arabia": "riyadh",
    "pakistan": "islamabad", "bangladesh": "dhaka", "thailand": "bangkok", "vietnam": "hanoi",
    "south korea": "seoul", "north korea": "pyongyang", "indonesia": "jakarta", "philippines": "manila",
    "malaysia": "kuala lumpur", "new zealand": "wellington", "chile": "santiago", "peru": "lima",
    "colombia": "bogota", "venezuela": "caracas", "cuba": "havana", "morocco": "rabat", "algeria": "algiers",
    "ethiopia": "addis ababa", "ghana": "accra", "south africa": "pretoria", "ukraine": "kyiv",
    "hungary": "budapest", "czech republic": "prague", "romania": "bucharest", "bulgaria": "sofia",
    "serbia": "belgrade", "croatia": "zagreb", "iceland": "reykjavik", "estonia": "tallinn",
    "latvia": "riga", "lithuania": "vilnius", "mongolia": "ulaanbaatar", "nepal": "kathmandu",
    "sri lanka": "colombo", "afghanistan": "kabul", "qatar": "doha", "jordan": "amman", "lebanon": "beirut",
    "syria": "damascus", "tunisia": "tunis", "senegal": "dakar", "uganda": "kampala", "tanzania": "dodoma",
    "zimbabwe": "harare", "bolivia": "sucre", "ecuador": "quito", "uruguay": "montevideo",
    "paraguay": "asuncion", "jamaica": "kingston", "singapore": "singapore", "luxembourg": "luxembourg",
    "slovakia": "bratislava", "slovenia": "ljubljana", "cambodia": "phnom penh", "laos": "vientiane",
}
