#!/usr/bin/env python3
"""Makes cli/src/html/land-110m.svgpath, the world outline under the HTML
report's map, from Natural Earth's 1:110m land polygons (public domain) as
the npm package world-atlas 2.0.2 ships them (land-110m.json, TopoJSON):

    npm pack world-atlas@2.0.2 && tar xzf world-atlas-2.0.2.tgz
    python3 scripts/world-outline.py package/land-110m.json > cli/src/html/land-110m.svgpath

Each polygon ring is simplified (Douglas-Peucker, 0.4 degrees), rings
smaller than a degree either way are left out, and the rest are written
as one SVG path in tenths of a degree (x = longitude, y = -latitude) with
relative moves: about 10 KB. Antarctica's ring is closed along the South
Pole's edge of the map rather than by a line across it; the rings across
the antimeridian (Fiji, Chukotka, Wrangel Island) are cut at it into a
piece each side."""

import json
import sys

TOLERANCE = 0.4
SMALLEST = 1.0


def rings_of(topology):
    sx, sy = topology["transform"]["scale"]
    tx, ty = topology["transform"]["translate"]
    arcs = []
    for arc in topology["arcs"]:
        x = y = 0
        points = []
        for dx, dy in arc:
            x += dx
            y += dy
            points.append((x * sx + tx, y * sy + ty))
        arcs.append(points)

    def arc(i):
        return arcs[i] if i >= 0 else arcs[~i][::-1]

    for geometry in topology["objects"]["land"]["geometries"]:
        polygons = geometry["arcs"] if geometry["type"] == "MultiPolygon" else [geometry["arcs"]]
        for polygon in polygons:
            for ring in polygon:
                points = []
                for i in ring:
                    a = arc(i)
                    points.extend(a if not points else a[1:])
                yield points


def simplify(points, tolerance):
    if len(points) < 3:
        return points
    keep = [False] * len(points)
    keep[0] = keep[-1] = True
    stack = [(0, len(points) - 1)]
    while stack:
        a, b = stack.pop()
        (x1, y1), (x2, y2) = points[a], points[b]
        dx, dy = x2 - x1, y2 - y1
        length = (dx * dx + dy * dy) ** 0.5
        best, at = 0.0, None
        for i in range(a + 1, b):
            x, y = points[i]
            if length > 0:
                d = abs(dy * (x - x1) - dx * (y - y1)) / length
            else:
                d = ((x - x1) ** 2 + (y - y1) ** 2) ** 0.5
            if d > best:
                best, at = d, i
        if at is not None and best > tolerance:
            keep[at] = True
            stack += [(a, at), (at, b)]
    return [p for p, k in zip(points, keep) if k]


def close_at_the_pole(points):
    """Antarctica's ring crosses the antimeridian once (an edge from about
    178 E to 180 W): on a flat map it goes east to 180, down to -90, back
    along the pole to -180 and up again, not across the map."""
    n = len(points)
    jumps = [i for i in range(n) if abs(points[(i + 1) % n][0] - points[i][0]) > 180]
    if len(jumps) != 1 or min(y for _, y in points) > -60:
        return points
    i = jumps[0]
    (x0, y0), (x1, y1) = points[i], points[(i + 1) % n]
    east = x1 + 360 if x1 < x0 else x1 - 360
    edge = 180 if x0 > 0 else -180
    lat = y0 + (y1 - y0) * (edge - x0) / (east - x0)
    detour = [(edge, lat), (edge, -90.0), (-edge, -90.0), (-edge, lat)]
    return points[: i + 1] + detour + points[i + 1 :]


def unwrap(points):
    """The ring with each longitude within 180 degrees of the one before:
    a ring across the antimeridian (Fiji, Chukotka) goes past 180 (or
    -180) instead of jumping across the map."""
    out = [points[0]]
    for x, y in points[1:]:
        last = out[-1][0]
        while x - last > 180:
            x -= 360
        while last - x > 180:
            x += 360
        out.append((x, y))
    return out


def clip(points, inside, cross):
    """Sutherland-Hodgman: the ring cut to one side of a line."""
    out = []
    for i, p in enumerate(points):
        q = points[(i + 1) % len(points)]
        if inside(p):
            out.append(p)
            if not inside(q):
                out.append(cross(p, q))
        elif inside(q):
            out.append(cross(p, q))
    return out


def at_lon(lon):
    def cross(p, q):
        t = (lon - p[0]) / (q[0] - p[0])
        return (lon, p[1] + t * (q[1] - p[1]))

    return cross


def within_the_map(points):
    """The pieces of an unwrapped ring between -180 and 180: the ring
    moved by -360, 0 and 360 degrees, each cut at both edges."""
    pieces = []
    for shift in (-360, 0, 360):
        moved = [(x + shift, y) for x, y in points]
        moved = clip(moved, lambda p: p[0] <= 180, at_lon(180))
        moved = clip(moved, lambda p: p[0] >= -180, at_lon(-180)) if moved else []
        if len(moved) >= 3:
            pieces.append(moved)
    return pieces


def path(points):
    q = [(round(x * 10), round(-y * 10)) for x, y in points]
    out = [q[0]]
    for p in q[1:]:
        if p != out[-1]:
            out.append(p)
    if len(out) > 1 and out[-1] == out[0]:
        out.pop()
    if len(out) < 3:
        return ""
    text = f"M{out[0][0]} {out[0][1]}l"
    moves = ""
    for (x0, y0), (x1, y1) in zip(out, out[1:]):
        for v in (x1 - x0, y1 - y0):
            if moves and v >= 0:
                moves += " "
            moves += str(v)
    return text + moves + "z"


def main():
    topology = json.load(open(sys.argv[1]))
    parts = []
    for ring in rings_of(topology):
        lons = [x for x, _ in unwrap(ring)]
        lats = [y for _, y in ring]
        if max(lons) - min(lons) < SMALLEST and max(lats) - min(lats) < SMALLEST:
            continue
        n = len(ring)
        jumps = sum(1 for i in range(n) if abs(ring[(i + 1) % n][0] - ring[i][0]) > 180)
        if jumps == 1:
            pieces = [close_at_the_pole(simplify(ring, TOLERANCE))]
        else:
            pieces = within_the_map(simplify(unwrap(ring), TOLERANCE))
        parts.extend(path(piece) for piece in pieces if len(piece) >= 4)
    sys.stdout.write("".join(parts) + "\n")


main()
