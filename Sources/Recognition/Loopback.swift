import Foundation

/// Whether a host names this machine's loopback interface, from its text alone.
public enum Loopback {
    /// `localhost`, an IPv4 literal in 127.0.0.0/8, `::1` or an IPv4-mapped `::ffff:127.x.y.z`,
    /// with or without brackets. Names are not resolved: `127.evil.example` is a remote host.
    public static func contains(_ host: String) -> Bool {
        let bare = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]")).lowercased()
        if bare == "localhost" { return true }
        var v4 = in_addr()
        // inet_pton takes only the dotted-quad form, so "127.1" or "127.0.0.1.example" do not parse.
        if inet_pton(AF_INET, bare, &v4) == 1 { return UInt32(bigEndian: v4.s_addr) >> 24 == 127 }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, bare, &v6) == 1 else { return false }
        return withUnsafeBytes(of: &v6) { bytes in
            let loopback = bytes.dropLast().allSatisfy { $0 == 0 } && bytes.last == 1
            let mappedV4 = bytes.prefix(10).allSatisfy { $0 == 0 } && bytes[10] == 0xff && bytes[11] == 0xff
            return loopback || (mappedV4 && bytes[12] == 127)
        }
    }
}
